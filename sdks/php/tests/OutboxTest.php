<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\Outbox;

final class OutboxTest extends TestCase
{
    public function testRowWithEveryColumn(): void
    {
        $this->assertSame(
            ['order.created', '{"id":1}', 'o-1', '{"ep_1","ep \\"2\\""}'],
            Outbox::params('order.created', ['id' => 1], 'o-1', ['ep_1', 'ep "2"']),
        );
    }

    public function testOptionalColumnsAreNull(): void
    {
        $this->assertSame(['a', '[1,2]', null, null], Outbox::params('a', [1, 2]));
    }

    public function testTypeIsRequired(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        Outbox::params('', []);
    }
}
