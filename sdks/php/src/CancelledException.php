<?php

declare(strict_types=1);

namespace Webhookd;

/** The call was cancelled (its 'cancel' callable said so) or ran out of its 'timeout'. */
class CancelledException extends \RuntimeException
{
    public function __construct(string $message, public readonly ?WebhookdException $lastError = null)
    {
        parent::__construct($message);
    }
}
