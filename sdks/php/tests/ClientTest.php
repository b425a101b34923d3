<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\CancelledException;
use Webhookd\Client;
use Webhookd\RetryPolicy;
use Webhookd\WebhookdException;

/** The client against a scripted loopback server (`php -S` with tests/server/router.php). */
final class ClientTest extends TestCase
{
    private string $dir;
    /** @var resource */
    private $proc;
    private string $url;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/webhookd-php-' . bin2hex(random_bytes(6));
        mkdir($this->dir);
        file_put_contents("{$this->dir}/script.json", '[]');
        $probe = stream_socket_server('tcp://127.0.0.1:0');
        $addr = stream_socket_get_name($probe, false);
        fclose($probe);
        $this->url = "http://{$addr}";
        $cmd = [PHP_BINARY, '-S', $addr, __DIR__ . '/server/router.php'];
        $this->proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'],
            2 => ['file', '/dev/null', 'w']], $pipes, null, ['SCRIPT_DIR' => $this->dir]);
        $deadline = microtime(true) + 10;
        while (@fsockopen('127.0.0.1', (int) explode(':', $addr)[1]) === false) {
            if (microtime(true) > $deadline) {
                $this->fail("php -S on {$addr} did not start");
            }
            usleep(20_000);
        }
    }

    protected function tearDown(): void
    {
        proc_terminate($this->proc);
        proc_close($this->proc);
        array_map('unlink', glob("{$this->dir}/*"));
        rmdir($this->dir);
    }

    /** @param list<array<string, mixed>> $rules */
    private function script(array $rules): void
    {
        file_put_contents("{$this->dir}/script.json", json_encode($rules));
    }

    /** @return list<array<string, mixed>> */
    private function seen(): array
    {
        $log = "{$this->dir}/log.jsonl";
        return is_file($log) ? array_map(fn ($l) => json_decode($l, true), file($log)) : [];
    }

    private static function apiError(string $code, array $extra = []): array
    {
        return ['error' => ['code' => $code, 'message' => 'm', 'request_id' => 'req_body'] + $extra];
    }

    private function client(): Client
    {
        return new Client($this->url, 'key', new RetryPolicy(baseDelay: 0.001, maxDelay: 0.005));
    }

    public function testA503IsRetriedWithTheSameKeyAndA400IsNotRetried(): void
    {
        $this->script([
            ['n' => 1, 'status' => 503, 'body' => self::apiError('unavailable'), 'headers' => ['Retry-After' => '0']],
            ['path' => '/v1/events/batch', 'status' => 400, 'body' => self::apiError('validation_failed', ['field' => 'events[0].type'])],
            ['path' => '/v1/events', 'status' => 202, 'body' => ['id' => 'evt_1', 'deliveries' => []]],
        ]);
        $c = $this->client();
        $this->assertSame('evt_1', $c->sendEvent(['type' => 'a.b', 'data' => ['n' => 1]])['id']);
        $seen = $this->seen();
        $this->assertCount(2, $seen);
        $this->assertMatchesRegularExpression('/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/', $seen[0]['key']);
        $this->assertSame($seen[0]['key'], $seen[1]['key']);
        try {
            $c->sendEvents([['type' => 'bad type', 'data' => 1]]);
            $this->fail('a 400 did not throw');
        } catch (WebhookdException $e) {
            $this->assertSame([400, 'validation_failed', 'events[0].type', 'req_body', 1],
                [$e->status, $e->errorCode, $e->field, $e->requestId, $e->attempts]);
        }
        $this->assertCount(3, $this->seen());
        $this->assertNotSame($seen[0]['key'], $this->seen()[2]['key']);
    }

    public function testListsFollowNextCursor(): void
    {
        $this->script([
            ['cursor' => false, 'status' => 200, 'body' => ['data' => [['id' => 'ep_1'], ['id' => 'ep_2']], 'next_cursor' => 'c2']],
            ['cursor' => true, 'status' => 200, 'body' => ['data' => [['id' => 'ep_3']], 'next_cursor' => null]],
        ]);
        $ids = [];
        foreach ($this->client()->listEndpoints(2) as $ep) {
            $ids[] = $ep['id'];
        }
        $this->assertSame(['ep_1', 'ep_2', 'ep_3'], $ids);
        $this->assertSame('/v1/endpoints?limit=2&cursor=c2', $this->seen()[1]['uri']);
    }

    public function testTheTestRouteIsNotRetriedAfterA500AndADeleteFindingItGoneSucceeds(): void
    {
        $this->script([
            ['n' => 2, 'status' => 503, 'body' => self::apiError('unavailable')],
            ['method' => 'DELETE', 'status' => 404, 'body' => self::apiError('not_found')],
            ['status' => 500, 'body' => self::apiError('internal')],
        ]);
        $c = $this->client();
        try {
            $c->testEndpoint('ep_1');
            $this->fail('a 500 did not throw');
        } catch (WebhookdException $e) {
            $this->assertSame([500, 1], [$e->status, $e->attempts]);
        }
        $c->deleteEndpoint('ep_1'); // 503, then 404: an earlier try deleted it
        $this->assertCount(3, $this->seen());
    }

    public function testADeadlineShorterThanRetryAfterGivesUpAtOnceAndCancelStopsAWait(): void
    {
        $this->script([['status' => 429, 'body' => self::apiError('rate_limited'), 'headers' => ['Retry-After' => '20']]]);
        $c = new Client($this->url, 'key');
        $start = microtime(true);
        try {
            $c->getEvent('evt_1', ['timeout' => 3]);
            $this->fail('a 429 did not throw');
        } catch (WebhookdException $e) {
            $this->assertSame(429, $e->status);
        }
        $this->assertLessThan(1, microtime(true) - $start);
        $at = microtime(true) + 0.2;
        $start = microtime(true);
        try {
            $c->getEvent('evt_1', ['cancel' => fn () => microtime(true) >= $at]);
            $this->fail('a cancelled call did not throw');
        } catch (CancelledException $e) {
            $this->assertSame(429, $e->lastError?->status);
        }
        $this->assertLessThan(1, microtime(true) - $start);
    }

    public function testTheEventTypeCatalogAndPortalLinks(): void
    {
        $et = static fn (string $name, array $extra = []) => $extra + ['name' => $name, 'description' => '',
            'schema' => null, 'example' => null, 'validate' => false, 'archived' => false,
            'created_at' => '2026-01-01T00:00:00Z', 'updated_at' => '2026-01-01T00:00:00Z'];
        $this->script([
            ['n' => 1, 'status' => 503, 'body' => self::apiError('unavailable'), 'headers' => ['Retry-After' => '0']],
            ['method' => 'POST', 'path' => '/v1/event-types', 'status' => 201, 'body' => $et('invoice.paid')],
            ['method' => 'GET', 'path' => '/v1/event-types/a%2Fb', 'status' => 404, 'body' => self::apiError('not_found')],
            ['method' => 'GET', 'path' => '/v1/event-types', 'cursor' => false, 'status' => 200,
                'body' => ['data' => [$et('a.b')], 'next_cursor' => 'c2']],
            ['method' => 'GET', 'path' => '/v1/event-types', 'cursor' => true, 'status' => 200,
                'body' => ['data' => [$et('c.d')], 'next_cursor' => null]],
            ['method' => 'PATCH', 'status' => 200, 'body' => $et('invoice.paid', ['validate' => true])],
            ['method' => 'DELETE', 'status' => 200, 'body' => $et('invoice.paid', ['archived' => true])],
            ['path' => '/v1/portal-sessions', 'status' => 201,
                'body' => ['url' => 'http://x/portal/open/wpl_1', 'expires_at' => '2026-01-01T01:00:00Z']],
        ]);
        $c = $this->client();
        $created = $c->createEventType(['name' => 'invoice.paid', 'schema' => ['type' => 'object'], 'validate' => true]);
        $this->assertSame('invoice.paid', $created['name']);
        $seen = $this->seen();
        $this->assertCount(2, $seen);
        $this->assertMatchesRegularExpression('/^[0-9a-f-]{36}$/', $seen[0]['key']);
        $this->assertSame($seen[0]['key'], $seen[1]['key']);
        $this->assertSame('{"name":"invoice.paid","schema":{"type":"object"},"validate":true}', $seen[1]['body']);

        $names = [];
        foreach ($c->listEventTypes(archived: true, limit: 1) as $t) {
            $names[] = $t['name'];
        }
        $this->assertSame(['a.b', 'c.d'], $names);
        $seen = $this->seen();
        $this->assertSame('/v1/event-types?archived=true&limit=1', $seen[2]['uri']);
        $this->assertSame('/v1/event-types?archived=true&limit=1&cursor=c2', $seen[3]['uri']);

        try {
            $c->getEventType('a/b');
            $this->fail('a 404 did not throw');
        } catch (WebhookdException $e) {
            $this->assertSame([404, 'not_found'], [$e->status, $e->errorCode]);
        }
        $this->assertTrue($c->updateEventType('invoice.paid', ['validate' => true, 'example' => null])['validate']);
        $seen = $this->seen();
        $this->assertSame(['PATCH', '/v1/event-types/invoice.paid', '{"validate":true,"example":null}'],
            [$seen[5]['method'], $seen[5]['uri'], $seen[5]['body']]);
        $this->assertTrue($c->archiveEventType('invoice.paid')['archived']);
        $this->assertSame(['DELETE', null], [$this->seen()[6]['method'], $this->seen()[6]['key']]);

        $link = $c->createPortalSession('1h', ['idempotency_key' => 'k-portal']);
        $this->assertStringContainsString('/portal/open/wpl_', $link['url']);
        $this->assertSame(['k-portal', '{"ttl":"1h"}'], [$this->seen()[7]['key'], $this->seen()[7]['body']]);
        $c->createPortalSession();
        $this->assertSame('{}', $this->seen()[8]['body']);
        $this->assertMatchesRegularExpression('/^[0-9a-f-]{36}$/', $this->seen()[8]['key']);
    }

    public function testStreamEventsBulkSendsAGeneratorChunkedWithoutHoldingItAndMakesOneTry(): void
    {
        $this->script([
            ['n' => 2, 'status' => 503, 'body' => self::apiError('unavailable'), 'headers' => ['Retry-After' => '0']],
            ['path' => '/v1/events/bulk', 'status' => 202, 'body' => ['job_id' => 'job_1']],
        ]);
        $c = $this->client();
        $n = 60000; // about 6 MB of NDJSON
        $events = (static function () use ($n): \Generator {
            for ($i = 1; $i <= $n; $i++) {
                yield ['type' => 'bulk.item', 'data' => ['n' => $i, 'pad' => str_repeat('x', 60)]];
            }
        })();
        $before = memory_get_usage();
        memory_reset_peak_usage();
        $this->assertSame('job_1', $c->streamEventsBulk($events, ['idempotency_key' => 'k1']));
        $grew = memory_get_peak_usage() - $before;
        $this->assertLessThan(2 << 20, $grew, 'the body was held in memory');
        $seen = $this->seen();
        $this->assertSame('chunked', $seen[0]['te']);
        $this->assertSame('k1', $seen[0]['key']);
        $lines = explode("\n", $seen[0]['body']);
        $this->assertCount($n + 1, $lines);
        $this->assertSame(['type' => 'bulk.item', 'data' => ['n' => 777, 'pad' => str_repeat('x', 60)]],
            json_decode($lines[776], true));
        // An array streams too; its 503 is not retried (the body is spent).
        try {
            $c->streamEventsBulk([['type' => 'a', 'data' => 1]]);
            $this->fail('no error');
        } catch (WebhookdException $e) {
            $this->assertSame([503, 1], [$e->status, $e->attempts]);
        }
        $this->assertCount(2, $this->seen());
    }

    public function testWaitJobBacksOffUntilFinishedAndReportsEachChange(): void
    {
        $job = static fn (string $st, int $done, int $failed): array => ['id' => 'job_1', 'kind' => 'event_bulk',
            'status' => $st, 'total' => 3, 'done' => $done, 'failed_count' => $failed];
        $this->script([
            ['n' => 1, 'status' => 200, 'body' => $job('queued', 0, 0)],
            ['n' => 5, 'status' => 200, 'body' => $job('succeeded', 2, 1)],
            ['path' => '/v1/jobs/job_1', 'status' => 200, 'body' => $job('running', 1, 0)],
        ]);
        $c = $this->client();
        $progress = [];
        $j = $c->waitJob('job_1', static function (array $p) use (&$progress): void {
            $progress[] = "{$p['status']} {$p['done']}/{$p['total']} {$p['failed_count']}";
        }, ['interval' => 0.005]);
        $this->assertSame('succeeded', $j['status']);
        $this->assertSame(['queued 0/3 0', 'running 1/3 0', 'succeeded 2/3 1'], $progress);
        $this->assertCount(5, $this->seen());
        $this->script([['status' => 200, 'body' => $job('running', 0, 0)]]);
        $this->expectException(CancelledException::class);
        $c->waitJob('job_1', null, ['interval' => 0.005, 'timeout' => 0.1]);
    }
}
