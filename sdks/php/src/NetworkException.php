<?php

declare(strict_types=1);

namespace Webhookd;

/** No answer came after the last try (network error or per-try timeout). */
class NetworkException extends \RuntimeException
{
    public function __construct(
        string $message,
        public readonly int $attempts,
        public readonly ?WebhookdException $lastError = null,
    ) {
        parent::__construct($message);
    }
}
