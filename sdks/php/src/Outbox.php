<?php

declare(strict_types=1);

namespace Webhookd;

/**
 * The outbox: make an event part of your own PostgreSQL transaction. The row
 * goes into webhookd_outbox (made once by `webhookd outbox init --database-url
 * URL`) in the transaction that makes your business change, so the event
 * exists exactly when it commits; webhookd's workers (WEBHOOKD_OUTBOX_SOURCES)
 * move it out. See the main README, "Outbox".
 */
final class Outbox
{
    /**
     * The INSERT with PDO's positional placeholders: type, data (JSON text),
     * external_id or null, endpoint_ids as a PostgreSQL array literal or null.
     * CAST rather than :: keeps it clear of PDO's placeholder parsing.
     */
    public const INSERT = 'INSERT INTO webhookd_outbox (type, data, external_id, endpoint_ids) '
        . 'VALUES (?, CAST(? AS jsonb), ?, CAST(? AS text[]))';

    /**
     * The parameters of INSERT for one row; $data is any JSON value.
     *
     * @param list<string>|null $endpointIds
     * @return list<string|null>
     */
    public static function params(string $type, mixed $data, ?string $externalId = null, ?array $endpointIds = null): array
    {
        if ($type === '') {
            throw new \InvalidArgumentException('outbox: type is required');
        }
        $ids = null;
        if ($endpointIds !== null) {
            $quoted = array_map(
                static fn (string $id): string => '"' . str_replace(['\\', '"'], ['\\\\', '\\"'], $id) . '"',
                $endpointIds,
            );
            $ids = '{' . implode(',', $quoted) . '}';
        }
        $json = json_encode($data, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        return [$type, $json, $externalId, $ids];
    }

    /**
     * Inserts one row with $pdo inside your open transaction
     * ($pdo->beginTransaction() ... $pdo->commit()): an event once that
     * transaction commits, and nothing if it rolls back.
     *
     * @param list<string>|null $endpointIds
     */
    public static function insert(\PDO $pdo, string $type, mixed $data, ?string $externalId = null, ?array $endpointIds = null): void
    {
        $stmt = $pdo->prepare(self::INSERT);
        $stmt->execute(self::params($type, $data, $externalId, $endpointIds));
    }
}
