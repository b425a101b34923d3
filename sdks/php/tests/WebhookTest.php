<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\VerificationException;
use Webhookd\Webhook;

final class WebhookTest extends TestCase
{
    /** @return list<array<string, mixed>> requests webhookd really sent */
    private static function deliveries(): array
    {
        $f = json_decode(file_get_contents(__DIR__ . '/../../conformance/signatures.json'), true, 512, JSON_THROW_ON_ERROR);
        return $f['deliveries'];
    }

    public function testRequestsWebhookdSentVerifyWithEachSecret(): void
    {
        $this->assertGreaterThanOrEqual(2, count(self::deliveries()));
        foreach (self::deliveries() as $d) {
            $h = $d['headers'];
            $now = (int) $h['webhook-timestamp'];
            foreach ($d['secrets'] as $i => $secret) {
                $this->assertSame($h['webhook-id'], Webhook::verify($d['body'], $h, $secret, now: $now)['id'], $d['name']);
                $this->assertSame(explode(' ', $h['webhook-signature'])[$i], Webhook::sign($secret, $h['webhook-id'], $now, $d['body']));
            }
            Webhook::verify($d['body'], array_change_key_case($h, CASE_UPPER), $d['secrets'], now: $now);
        }
    }

    public function testTamperingAnotherSecretAndAFarClockAreRefused(): void
    {
        $other = 'whsec_' . base64_encode('another key of 24 bytes!');
        foreach (self::deliveries() as $d) {
            $h = $d['headers'];
            $now = (int) $h['webhook-timestamp'];
            $s = $d['secrets'][0];
            $cases = [
                'changed body' => fn () => Webhook::verify(str_replace('invoice', 'invoicf', $d['body']), $h, $s, now: $now),
                'another secret' => fn () => Webhook::verify($d['body'], $h, $other, now: $now),
                '5 minutes later' => fn () => Webhook::verify($d['body'], $h, $s, now: $now + 301),
                '5 minutes earlier' => fn () => Webhook::verify($d['body'], $h, $s, now: $now - 301),
                'no signature' => fn () => Webhook::verify($d['body'], ['webhook-signature' => ''] + $h, $s, now: $now),
                'another id' => fn () => Webhook::verify($d['body'], ['webhook-id' => 'evt_x'] + $h, $s, now: $now),
            ];
            foreach ($cases as $what => $call) {
                try {
                    $call();
                    $this->fail("{$d['name']}: {$what} verified");
                } catch (VerificationException) {
                    $this->addToAssertionCount(1);
                }
            }
            Webhook::verify($d['body'], $h, $s, now: $now + 299);
        }
    }
}
