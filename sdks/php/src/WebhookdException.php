<?php

declare(strict_types=1);

namespace Webhookd;

/**
 * An answer of the API that was not a success (SPEC §2 error shape). After
 * retries it describes the last answer; $attempts says how many tries were made.
 */
class WebhookdException extends \RuntimeException
{
    private const RETRYABLE = [429, 500, 502, 503, 504];
    private const STATUS_CODES = [401 => 'unauthorized', 404 => 'not_found', 405 => 'method_not_allowed',
        413 => 'payload_too_large', 429 => 'rate_limited', 502 => 'unavailable', 503 => 'unavailable',
        504 => 'unavailable'];

    /** @param array<string, string> $headers lower-case names */
    public function __construct(
        public readonly int $status,
        public readonly string $errorCode,
        public readonly string $errorMessage,
        public readonly ?string $field = null,
        public readonly ?string $requestId = null,
        public readonly ?string $existingId = null,
        public readonly int $attempts = 1,
        public readonly array $headers = [],
        public readonly string $body = '',
    ) {
        $text = "webhookd: {$status} {$errorCode}: {$errorMessage}";
        if ($field !== null && $field !== '') {
            $text .= " (field {$field})";
        }
        if ($requestId !== null && $requestId !== '') {
            $text .= " [{$requestId}]";
        }
        if ($attempts > 1) {
            $text .= " after {$attempts} tries";
        }
        parent::__construct($text, $status);
    }

    /** Whether a later try might not get this answer (429, 5xx, a key still in progress). */
    public function isTemporary(): bool
    {
        return in_array($this->status, self::RETRYABLE, true) || $this->errorCode === 'idempotency_key_in_progress';
    }

    /** @param array<string, string> $headers lower-case names */
    public static function fromResponse(int $status, array $headers, string $body, int $attempts): self
    {
        $wire = json_decode($body, true);
        $err = is_array($wire) && is_array($wire['error'] ?? null) ? $wire['error'] : null;
        if ($err !== null && is_string($err['code'] ?? null) && $err['code'] !== '') {
            return new self($status, $err['code'], (string) ($err['message'] ?? ''), $err['field'] ?? null,
                ($err['request_id'] ?? '') !== '' ? $err['request_id'] : ($headers['x-request-id'] ?? null),
                $err['existing_id'] ?? null, $attempts, $headers, $body);
        }
        $code = self::STATUS_CODES[$status] ?? ($status >= 500 ? 'internal' : "http_{$status}");
        return new self($status, $code, "HTTP {$status}", null, $headers['x-request-id'] ?? null, null, $attempts,
            $headers, $body);
    }
}
