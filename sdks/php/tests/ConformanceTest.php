<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\CancelledException;
use Webhookd\Client;
use Webhookd\RetryPolicy;
use Webhookd\WebhookdException;

/**
 * Runs sdks/conformance/cases.json against cmd/webhookd-conformance (make
 * test-sdks starts it and sets WEBHOOKD_CONFORMANCE_URL): a real API behind a
 * fault proxy. The checks are the server's (internal/conformance); this runner
 * only makes each case's calls with one client and reports them. PHP has no
 * threads: a call's "concurrency" runs one call after another.
 */
final class ConformanceTest extends TestCase
{
    /** @return array<string, array{array<string, mixed>}> */
    public static function cases(): array
    {
        $f = json_decode(file_get_contents(__DIR__ . '/../../conformance/cases.json'), true, 512, JSON_THROW_ON_ERROR);
        $out = [];
        foreach ($f['cases'] as $c) {
            $out[$c['name']] = [$c];
        }
        return $out;
    }

    /** @dataProvider cases @param array<string, mixed> $case */
    public function testCase(array $case): void
    {
        $control = getenv('WEBHOOKD_CONFORMANCE_URL');
        if ($control === false || $control === '') {
            $this->markTestSkipped('WEBHOOKD_CONFORMANCE_URL is not set (make test-sdks sets it)');
        }
        $sess = self::post("{$control}/sessions", ['case' => $case['name']]);
        $r = $case['retry'] ?? [];
        $client = new Client($sess['api_url'], $sess['api_key'], new RetryPolicy(
            maxAttempts: $r['max_attempts'] ?? 5,
            baseDelay: ($r['base_delay_ms'] ?? 250) / 1000,
            maxDelay: ($r['max_delay_ms'] ?? 30000) / 1000,
        ));
        $start = microtime(true);
        $results = [];
        foreach ($case['calls'] as $call) {
            for ($i = 0; $i < ($call['repeat'] ?? 1); $i++) {
                $results[] = self::runCall($client, $call);
            }
        }
        $verdict = self::post("{$control}/sessions/{$sess['id']}/outcome",
            ['results' => $results, 'elapsed_ms' => (int) ((microtime(true) - $start) * 1000)]);
        $this->assertSame([], $verdict['problems'], $case['name']);
    }

    /** @param array<string, mixed> $call @return array<string, mixed> */
    private static function runCall(Client $client, array $call): array
    {
        $opts = [];
        if (isset($call['cancel_after_ms'])) {
            $at = microtime(true) + $call['cancel_after_ms'] / 1000;
            $opts['cancel'] = static fn (): bool => microtime(true) >= $at;
        }
        try {
            if ($call['op'] === 'send_event') {
                if (isset($call['idempotency_key'])) {
                    $opts['idempotency_key'] = $call['idempotency_key'];
                }
                $event = ['type' => $call['type'], 'data' => $call['data']];
                if (isset($call['external_id'])) {
                    $event['external_id'] = $call['external_id'];
                }
                $ev = $client->sendEvent($event, $opts);
            } elseif ($call['op'] === 'send_bulk') {
                return self::runBulk($client, $call, $opts);
            } else {
                $ev = $client->getEvent($call['id'], $opts);
            }
            return ['ok' => true, 'id' => $ev['id']];
        } catch (WebhookdException | CancelledException $e) {
            $api = $e instanceof CancelledException ? $e->lastError : $e;
            return ['ok' => false, 'error' => [
                'cancelled' => $e instanceof CancelledException, 'message' => $e->getMessage(),
                'status' => $api?->status ?? 0, 'code' => $api?->errorCode ?? '', 'field' => $api?->field ?? '',
                'request_id' => $api?->requestId ?? '', 'attempts' => $api?->attempts ?? 0,
            ]];
        }
    }

    /**
     * Streams a send_bulk call's events from a generator as one job, waits for it with a progress callback and
     * lists its refused lines.
     * @param array<string, mixed> $call @param array<string, mixed> $opts @return array<string, mixed>
     */
    private static function runBulk(Client $client, array $call, array $opts): array
    {
        $events = (static function () use ($call): \Generator {
            yield from $call['events'];
        })();
        $id = $client->streamEventsBulk($events, $opts);
        $progress = [];
        $counts = static fn (array $j): array => ['status' => $j['status'], 'total' => $j['total'], 'done' => $j['done'],
            'failed_count' => $j['failed_count']];
        $j = $client->waitJob($id, static function (array $p) use (&$progress, $counts): void {
            $progress[] = $counts($p);
        }, ['interval' => 0.02, 'timeout' => 30] + $opts);
        $errors = array_map(static fn (array $e): array => ['line' => $e['line'], 'code' => $e['code'],
            'field' => $e['field'] ?? ''], $client->listJobErrors($id, $opts));
        return ['ok' => true, 'id' => $id, 'job' => $counts($j) + ['progress' => $progress, 'errors' => $errors]];
    }

    /** @param array<string, mixed> $body @return array<string, mixed> */
    private static function post(string $url, array $body): array
    {
        $ch = curl_init($url);
        curl_setopt_array($ch, [CURLOPT_POST => true, CURLOPT_POSTFIELDS => json_encode($body, JSON_THROW_ON_ERROR),
            CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 60]);
        $out = curl_exec($ch);
        $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        curl_close($ch);
        if (!is_string($out) || $status !== 200) {
            throw new \RuntimeException("conformance server: {$url}: {$status} " . var_export($out, true));
        }
        return json_decode($out, true, 512, JSON_THROW_ON_ERROR);
    }
}
