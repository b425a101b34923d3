<?php

declare(strict_types=1);

namespace Webhookd;

/**
 * Keeps one client under the project's rate limit, as the Go client does.
 * Every answer's X-RateLimit-Limit, -Remaining and -Reset update it; before
 * each request it takes one of the remaining requests. When only a few are
 * left (5, or a quarter of a small limit) calls wait for a slot each, one per
 * the time the limit takes to win back one request, so a long loop runs at the
 * limit's steady rate instead of into 429; when none are left (or a 429 said
 * so) they wait for the reset. Shared by every call of one Client object.
 */
final class Pacer
{
    private const MAX_WAIT = 120.0;
    private bool $known = false;
    private int $remaining = 0;
    private float $reset = 0.0;
    private int $limit = 0;
    private float $nextSlot = 0.0;

    private function low(): int
    {
        return $this->limit > 0 ? min(5, intdiv($this->limit, 4)) : 5;
    }

    /** Waits (through $sleep, which throws when the call is cancelled) until a request may go. */
    public function wait(callable $sleep): void
    {
        while (true) {
            $now = microtime(true);
            if ($this->known && $now >= $this->reset) {
                $this->known = false;
            }
            if (!$this->known || $this->remaining > $this->low()) {
                $this->remaining--;
                return;
            }
            if ($this->remaining <= 0 || $this->limit <= $this->remaining) {
                $sleep(min($this->reset - $now, self::MAX_WAIT));
                continue;
            }
            $interval = ($this->reset - $now) / ($this->limit - $this->remaining);
            $slot = $this->nextSlot > $now ? $this->nextSlot + $interval : $now + $interval;
            $slot = min($slot, $now + self::MAX_WAIT);
            $this->nextSlot = $slot;
            $sleep($slot - $now);
            $this->remaining--;
            return;
        }
    }

    /** @param array<string, string>|null $headers lower-case names; null when no answer came */
    public function done(?int $status, ?array $headers): void
    {
        if ($status === null || $headers === null) {
            return;
        }
        $remaining = $headers['x-ratelimit-remaining'] ?? null;
        $reset = $headers['x-ratelimit-reset'] ?? null;
        if ($remaining === null || $reset === null || !is_numeric($remaining) || !is_numeric($reset)) {
            return;
        }
        if (is_numeric($headers['x-ratelimit-limit'] ?? null)) {
            $this->limit = (int) $headers['x-ratelimit-limit'];
        }
        $this->known = true;
        $this->remaining = (int) $remaining;
        $this->reset = (float) $reset;
        if ($status === 429) {
            $ra = RetryPolicy::parseRetryAfter($headers['retry-after'] ?? null);
            if ($ra !== null) {
                $this->remaining = 0;
                $this->reset = microtime(true) + $ra;
            }
        }
    }
}
