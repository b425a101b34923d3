<?php

declare(strict_types=1);

namespace Webhookd;

/** Verifies deliveries webhookd sent (Standard Webhooks signatures). */
final class Webhook
{
    public const DEFAULT_TOLERANCE = 300;

    /**
     * Verifies a delivery: the raw body as received, its headers (any array,
     * names in any case — getallheaders() will do), and the endpoint's secret
     * (whsec_...) or both secrets during a rotation. Returns the decoded body;
     * throws VerificationException when no signature matches any secret or
     * webhook-timestamp is more than $tolerance seconds (5 minutes) from now.
     * Signatures are compared in constant time (hash_equals).
     *
     * @param array<string, string|list<string>> $headers
     * @param string|list<string> $secret
     */
    public static function verify(string $body, array $headers, string|array $secret,
        int $tolerance = self::DEFAULT_TOLERANCE, ?int $now = null): mixed
    {
        $h = [];
        foreach ($headers as $k => $v) {
            $h[strtolower((string) $k)] = is_array($v) ? implode(' ', $v) : (string) $v;
        }
        $id = $h['webhook-id'] ?? '';
        $ts = $h['webhook-timestamp'] ?? '';
        $sigs = $h['webhook-signature'] ?? '';
        if ($id === '' || $ts === '' || $sigs === '') {
            throw new VerificationException('webhookd: missing webhook-id, webhook-timestamp or webhook-signature');
        }
        if (!ctype_digit($ts)) {
            throw new VerificationException('webhookd: webhook-timestamp is not Unix seconds');
        }
        $now ??= time();
        if ($now - (int) $ts > $tolerance) {
            throw new VerificationException('webhookd: webhook-timestamp is too old');
        }
        if ((int) $ts - $now > $tolerance) {
            throw new VerificationException('webhookd: webhook-timestamp is too new');
        }
        $ok = false;
        foreach (is_array($secret) ? $secret : [$secret] as $s) {
            $expected = self::sign($s, $id, (int) $ts, $body);
            foreach (explode(' ', $sigs) as $entry) {
                if (hash_equals($expected, $entry)) {
                    $ok = true;
                }
            }
        }
        if (!$ok) {
            throw new VerificationException('webhookd: no signature matches');
        }
        return json_decode($body, true, 512, JSON_THROW_ON_ERROR);
    }

    /** The webhook-signature entry webhookd sends for one secret (for receivers' own tests). */
    public static function sign(string $secret, string $id, int $timestamp, string $body): string
    {
        $encoded = str_starts_with($secret, 'whsec_') ? substr($secret, 6) : $secret;
        $key = base64_decode($encoded, true);
        if ($key === false || $key === '') {
            throw new VerificationException('webhookd: the signing secret is not whsec_ + base64');
        }
        return 'v1,' . base64_encode(hash_hmac('sha256', "{$id}.{$timestamp}.{$body}", $key, true));
    }
}
