<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\RetryPolicy;
use Webhookd\WebhookdException;

final class RetryTest extends TestCase
{
    public function testBackoffIsFullJitterUnderACappedDoublingCeiling(): void
    {
        $p = new RetryPolicy(baseDelay: 0.1, maxDelay: 1.0);
        foreach ([[1, 0.1], [3, 0.4], [10, 1.0]] as [$n, $ceiling]) {
            for ($i = 0; $i < 50; $i++) {
                $d = $p->backoff($n);
                $this->assertGreaterThanOrEqual(0, $d);
                $this->assertLessThanOrEqual($ceiling, $d);
            }
        }
    }

    public function testRetryAfterReadsSecondsAndDates(): void
    {
        $this->assertSame(2.0, RetryPolicy::parseRetryAfter('2'));
        $this->assertEqualsWithDelta(6.0, RetryPolicy::parseRetryAfter('Thu, 01 Jan 1970 00:00:10 GMT', 4.0), 0.001);
        $this->assertNull(RetryPolicy::parseRetryAfter('soon'));
        $this->assertNull(RetryPolicy::parseRetryAfter(null));
    }

    public function testErrorsAreTyped(): void
    {
        $body = '{"error":{"code":"validation_failed","message":"type is bad","field":"type","request_id":"req_1"}}';
        $e = WebhookdException::fromResponse(400, [], $body, 1);
        $this->assertSame([400, 'validation_failed', 'type is bad', 'type', 'req_1', false],
            [$e->status, $e->errorCode, $e->errorMessage, $e->field, $e->requestId, $e->isTemporary()]);
        $e = WebhookdException::fromResponse(502, ['x-request-id' => 'req_2'], '<html>bad gateway</html>', 3);
        $this->assertSame(['unavailable', 'req_2', 3, true], [$e->errorCode, $e->requestId, $e->attempts, $e->isTemporary()]);
    }
}
