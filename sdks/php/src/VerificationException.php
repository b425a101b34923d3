<?php

declare(strict_types=1);

namespace Webhookd;

/** A delivery whose signature, timestamp or headers do not check out. */
class VerificationException extends \RuntimeException
{
}
