<?php
// Router of the loopback server ClientTest starts with `php -S`: it answers
// each request by the first rule of $SCRIPT_DIR/script.json that matches
// (request number n from 1, method, path prefix, query has cursor) and
// appends the request (its body as sent) to $SCRIPT_DIR/log.jsonl.
declare(strict_types=1);

$dir = getenv('SCRIPT_DIR');
$rules = json_decode(file_get_contents("{$dir}/script.json"), true);
$log = "{$dir}/log.jsonl";
$n = is_file($log) ? count(file($log)) + 1 : 1;
$method = $_SERVER['REQUEST_METHOD'];
$uri = $_SERVER['REQUEST_URI'];
file_put_contents($log, json_encode(['method' => $method, 'uri' => $uri,
    'key' => $_SERVER['HTTP_IDEMPOTENCY_KEY'] ?? null, 'te' => $_SERVER['HTTP_TRANSFER_ENCODING'] ?? null,
    'length' => $_SERVER['CONTENT_LENGTH'] ?? null, 'body' => file_get_contents('php://input')]) . "\n", FILE_APPEND);
foreach ($rules as $r) {
    if ((isset($r['n']) && $r['n'] !== $n) || (isset($r['method']) && $r['method'] !== $method)
        || (isset($r['path']) && !str_starts_with($uri, $r['path']))
        || (isset($r['cursor']) && $r['cursor'] !== str_contains($uri, 'cursor='))) {
        continue;
    }
    http_response_code($r['status']);
    header('Content-Type: application/json');
    header('X-Request-Id: req_test');
    foreach ($r['headers'] ?? [] as $k => $v) {
        header("{$k}: {$v}");
    }
    echo json_encode($r['body']);
    return true;
}
http_response_code(599);
echo '{"error":{"code":"no_rule","message":"no rule matched"}}';
return true;
