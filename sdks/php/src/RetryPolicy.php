<?php

declare(strict_types=1);

namespace Webhookd;

/** How a call is retried; the defaults are the Go client's. */
final class RetryPolicy
{
    public function __construct(
        /** Tries of one call, the first included; 1 turns retries off. */
        public readonly int $maxAttempts = 5,
        /** Backoff ceiling before the second try, seconds; doubled for each later one. */
        public readonly float $baseDelay = 0.25,
        /** Cap of the backoff (not of Retry-After), seconds. */
        public readonly float $maxDelay = 30.0,
        /** The longest Retry-After waited out; a longer one ends the call with that answer. */
        public readonly float $maxRetryAfter = 120.0,
        /** Bound of one try, seconds; a try that runs out is retried. */
        public readonly float $perTryTimeout = 40.0,
    ) {
    }

    /** The wait before try $n+1 after try $n failed without a Retry-After: full jitter, uniform in [0, min(maxDelay, baseDelay·2^(n-1))]. */
    public function backoff(int $n): float
    {
        $ceiling = min($this->maxDelay, $this->baseDelay * 2 ** min($n - 1, 30));
        return $ceiling * mt_rand() / mt_getrandmax();
    }

    /** The wait for a Retry-After: never less, plus up to a fifth more. */
    public static function afterRetryAfter(float $seconds): float
    {
        return $seconds + ($seconds / 5 + 0.001) * mt_rand() / mt_getrandmax();
    }

    /** Reads Retry-After (seconds or an HTTP date) as seconds; null when absent or unreadable. */
    public static function parseRetryAfter(?string $value, ?float $now = null): ?float
    {
        if ($value === null) {
            return null;
        }
        $value = trim($value);
        if ($value === '') {
            return null;
        }
        if (ctype_digit($value)) {
            return (float) min((int) $value, 2 ** 30);
        }
        $t = \DateTimeImmutable::createFromFormat(\DateTimeInterface::RFC7231, $value);
        if ($t === false) {
            return null;
        }
        return max($t->getTimestamp() - ($now ?? microtime(true)), 0.0);
    }
}
