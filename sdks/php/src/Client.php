<?php

declare(strict_types=1);

namespace Webhookd;

/**
 * webhookd's API client, with the Go client's safe defaults: every mutating
 * call sends an Idempotency-Key made once per call ('idempotency_key' to pass
 * your own) and reuses it on every retry; network errors, timeouts, 429, 500,
 * 502, 503 and 504 are retried with full-jitter backoff, Retry-After obeyed,
 * a bounded number of tries and an optional overall 'timeout'; other 4xx are
 * never retried; pacing on X-RateLimit-* is shared by every call of this
 * object. Call options: 'idempotency_key' (mutating calls), 'timeout'
 * (seconds, the whole call), 'cancel' (a callable returning true once the
 * caller wants the call to stop: it is checked while waiting and during a
 * transfer, and ends the call at once with CancelledException).
 *
 * @phpstan-type Options array{idempotency_key?: string, timeout?: float, cancel?: callable(): bool}
 */
final class Client
{
    public const VERSION = '0.1.0';

    /** Every route of /v1/openapi.json, by operationId: [method, path, client method]. */
    public const ROUTES = [
        'createEvent' => ['POST', '/v1/events', 'sendEvent'],
        'createEventBatch' => ['POST', '/v1/events/batch', 'sendEvents'],
        'getEvent' => ['GET', '/v1/events/{id}', 'getEvent'],
        'createEndpoint' => ['POST', '/v1/endpoints', 'createEndpoint'],
        'listEndpoints' => ['GET', '/v1/endpoints', 'listEndpoints'],
        'getEndpoint' => ['GET', '/v1/endpoints/{id}', 'getEndpoint'],
        'updateEndpoint' => ['PATCH', '/v1/endpoints/{id}', 'updateEndpoint'],
        'deleteEndpoint' => ['DELETE', '/v1/endpoints/{id}', 'deleteEndpoint'],
        'getEndpointSecret' => ['GET', '/v1/endpoints/{id}/secret', 'getEndpointSecret'],
        'rotateEndpointSecret' => ['POST', '/v1/endpoints/{id}/rotate-secret', 'rotateEndpointSecret'],
        'testEndpoint' => ['POST', '/v1/endpoints/{id}/test', 'testEndpoint'],
        'listDeliveries' => ['GET', '/v1/deliveries', 'listDeliveries'],
        'getDelivery' => ['GET', '/v1/deliveries/{id}', 'getDelivery'],
        'redeliver' => ['POST', '/v1/deliveries/{id}/redeliver', 'redeliver'],
        'listDeadLetters' => ['GET', '/v1/dead-letters', 'listDeadLetters'],
        'replayDeadLetters' => ['POST', '/v1/dead-letters/replay', 'replayDeadLetters'],
        'getJob' => ['GET', '/v1/jobs/{id}', 'getJob'],
        'listJobErrors' => ['GET', '/v1/jobs/{id}/errors', 'listJobErrors'],
        'cancelJob' => ['POST', '/v1/jobs/{id}/cancel', 'cancelJob'],
        'createEventsBulk' => ['POST', '/v1/events/bulk', 'sendEventsBulk'],
        'testEndpointFilter' => ['POST', '/v1/endpoints/{id}/filter/test', 'testEndpointFilter'],
        'testEndpointTransformation' => ['POST', '/v1/endpoints/{id}/transformation/test', 'testEndpointTransformation'],
        'createPortalSession' => ['POST', '/v1/portal-sessions', 'createPortalSession'],
        'createEventType' => ['POST', '/v1/event-types', 'createEventType'],
        'listEventTypes' => ['GET', '/v1/event-types', 'listEventTypes'],
        'getEventType' => ['GET', '/v1/event-types/{name}', 'getEventType'],
        'patchEventType' => ['PATCH', '/v1/event-types/{name}', 'updateEventType'],
        'deleteEventType' => ['DELETE', '/v1/event-types/{name}', 'archiveEventType'],
        'getOpenAPIDocument' => ['GET', '/v1/openapi.json', 'getOpenAPIDocument'],
    ];

    private readonly string $baseUrl;
    private readonly string $userAgent;
    private readonly Pacer $pacer;

    public function __construct(
        string $baseUrl,
        private readonly string $apiKey,
        private readonly RetryPolicy $retry = new RetryPolicy(),
        string $userAgent = '',
    ) {
        $scheme = parse_url($baseUrl, PHP_URL_SCHEME);
        if (!in_array($scheme, ['http', 'https'], true) || parse_url($baseUrl, PHP_URL_HOST) === null) {
            throw new \InvalidArgumentException("webhookd: base URL {$baseUrl} is not an absolute http(s) URL");
        }
        if ($apiKey === '') {
            throw new \InvalidArgumentException('webhookd: API key is empty');
        }
        $this->baseUrl = rtrim($baseUrl, '/');
        $this->userAgent = 'webhookd-php/' . self::VERSION . ($userAgent !== '' ? " {$userAgent}" : '');
        $this->pacer = new Pacer();
    }

    // ---- events

    /**
     * POST /v1/events: one logical operation, created once however often it is retried.
     * @param array{type: string, data: mixed, external_id?: string, endpoint_ids?: list<string>} $event
     * @param Options $opts
     * @return array<string, mixed> the Event
     */
    public function sendEvent(array $event, array $opts = []): array
    {
        return $this->do('POST', '/v1/events', body: $event, opts: $opts, key: true);
    }

    /**
     * POST /v1/events/batch: up to 1000 events, all or none, in order.
     * @param list<array<string, mixed>> $events
     * @param Options $opts
     * @return list<array<string, mixed>>
     */
    public function sendEvents(array $events, array $opts = []): array
    {
        return $this->do('POST', '/v1/events/batch', body: ['events' => $events], opts: $opts, key: true)['data'];
    }

    /** GET /v1/events/{id}. @param Options $opts @return array<string, mixed> */
    public function getEvent(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/events/' . rawurlencode($id), opts: $opts);
    }

    // ---- endpoints

    /** POST /v1/endpoints; the answer carries the secret. @param array<string, mixed> $endpoint @param Options $opts @return array<string, mixed> */
    public function createEndpoint(array $endpoint, array $opts = []): array
    {
        return $this->do('POST', '/v1/endpoints', body: $endpoint, opts: $opts, key: true);
    }

    /** GET /v1/endpoints, every page. @param Options $opts @return \Generator<int, array<string, mixed>> */
    public function listEndpoints(?int $limit = null, array $opts = []): \Generator
    {
        return $this->list('/v1/endpoints', ['limit' => $limit], $opts);
    }

    /** GET /v1/endpoints/{id}. @param Options $opts @return array<string, mixed> */
    public function getEndpoint(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/endpoints/' . rawurlencode($id), opts: $opts);
    }

    /**
     * PATCH /v1/endpoints/{id}; with $ifMatch only that version (else 412 version_mismatch).
     * @param array<string, mixed> $patch @param Options $opts @return array<string, mixed>
     */
    public function updateEndpoint(string $id, array $patch, ?int $ifMatch = null, array $opts = []): array
    {
        $headers = $ifMatch !== null ? ['If-Match: "' . $ifMatch . '"'] : [];
        return $this->do('PATCH', '/v1/endpoints/' . rawurlencode($id), body: $patch, opts: $opts, headers: $headers);
    }

    /** DELETE /v1/endpoints/{id}; a retry that finds it gone succeeds. @param Options $opts */
    public function deleteEndpoint(string $id, array $opts = []): void
    {
        $this->do('DELETE', '/v1/endpoints/' . rawurlencode($id), opts: $opts, deleteCall: true);
    }

    /** GET /v1/endpoints/{id}/secret. @param Options $opts @return array<string, mixed> */
    public function getEndpointSecret(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/endpoints/' . rawurlencode($id) . '/secret', opts: $opts);
    }

    /** POST /v1/endpoints/{id}/rotate-secret; the old one signs 24 h more. @param Options $opts @return array<string, mixed> */
    public function rotateEndpointSecret(string $id, array $opts = []): array
    {
        return $this->do('POST', '/v1/endpoints/' . rawurlencode($id) . '/rotate-secret', body: new \stdClass(),
            opts: $opts, key: true);
    }

    /**
     * POST /v1/endpoints/{id}/test. Not deduplicated by the API, so retried only
     * when it certainly did not act (429, or no connection made).
     * @param Options $opts @return array<string, mixed>
     */
    public function testEndpoint(string $id, mixed $data = null, array $opts = []): array
    {
        $body = $data === null ? new \stdClass() : ['data' => $data];
        return $this->do('POST', '/v1/endpoints/' . rawurlencode($id) . '/test', body: $body, opts: $opts, safe: false);
    }

    // ---- deliveries, dead letters, jobs

    /**
     * GET /v1/deliveries, newest first, every page.
     * @param array{status?: string, endpoint_id?: string, event_type?: string, event_id?: string, since?: string, limit?: int} $filter
     * @param Options $opts @return \Generator<int, array<string, mixed>>
     */
    public function listDeliveries(array $filter = [], array $opts = []): \Generator
    {
        return $this->list('/v1/deliveries', $filter, $opts);
    }

    /** GET /v1/deliveries/{id}, with every attempt. @param Options $opts @return array<string, mixed> */
    public function getDelivery(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/deliveries/' . rawurlencode($id), opts: $opts);
    }

    /** POST /v1/deliveries/{id}/redeliver. @param Options $opts @return array<string, mixed> */
    public function redeliver(string $id, array $opts = []): array
    {
        return $this->do('POST', '/v1/deliveries/' . rawurlencode($id) . '/redeliver', body: new \stdClass(),
            opts: $opts, key: true);
    }

    /**
     * GET /v1/dead-letters, every page.
     * @param array{endpoint_id?: string, event_type?: string, since?: string, until?: string, limit?: int} $filter
     * @param Options $opts @return \Generator<int, array<string, mixed>>
     */
    public function listDeadLetters(array $filter = [], array $opts = []): \Generator
    {
        return $this->list('/v1/dead-letters', $filter, $opts);
    }

    /**
     * POST /v1/dead-letters/replay: a background job; returns its id.
     * @param array{endpoint_id?: string, event_type?: string, since?: string, until?: string} $filter
     * @param Options $opts
     */
    public function replayDeadLetters(array $filter = [], array $opts = []): string
    {
        $body = $filter === [] ? new \stdClass() : $filter;
        return $this->do('POST', '/v1/dead-letters/replay', body: $body, opts: $opts, key: true)['job_id'];
    }

    /** GET /v1/jobs/{id}. @param Options $opts @return array<string, mixed> */
    public function getJob(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/jobs/' . rawurlencode($id), opts: $opts);
    }

    /**
     * GET /v1/jobs/{id}/errors: a bulk job's refused lines, {line, code, message, field}.
     * @param Options $opts @return list<array<string, mixed>>
     */
    public function listJobErrors(string $id, array $opts = []): array
    {
        return $this->do('GET', '/v1/jobs/' . rawurlencode($id) . '/errors', opts: $opts, ndjsonOut: true);
    }

    /**
     * POST /v1/jobs/{id}/cancel: a queued or running job ends canceled; a finished one comes back as it is.
     * @param Options $opts @return array<string, mixed>
     */
    public function cancelJob(string $id, array $opts = []): array
    {
        return $this->do('POST', '/v1/jobs/' . rawurlencode($id) . '/cancel', body: new \stdClass(), opts: $opts, key: true);
    }

    /**
     * POST /v1/events/bulk: events ({type, data, ...}) as one background job (up to 100,000); returns its id
     * once the whole body is stored. Follow it with getJob, its refused lines with listJobErrors.
     * @param iterable<array<string, mixed>> $events @param Options $opts
     */
    public function sendEventsBulk(iterable $events, array $opts = []): string
    {
        $ndjson = '';
        foreach ($events as $e) {
            $ndjson .= json_encode($e, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES) . "\n";
        }
        return $this->do('POST', '/v1/events/bulk', opts: $opts, key: true, ndjson: $ndjson)['job_id'];
    }

    // ---- bulk jobs, streamed

    /**
     * POST /v1/events/bulk with events streamed: each is written as an NDJSON line while curl sends the request
     * (chunked, CURLOPT_READFUNCTION), so neither the events nor the body are ever all in memory; returns the
     * job's id once the API has stored the whole body. $events may be any iterable, a generator reading a file or
     * a cursor included.
     *
     * The events are read once, so this makes one try: after a temporary error (429, 5xx, NetworkException) call
     * it again with the same events and the same 'idempotency_key', and the API answers with the job the first
     * try made, if it made one. Follow the job with waitJob.
     * @param iterable<array<string, mixed>> $events @param Options $opts
     */
    public function streamEventsBulk(iterable $events, array $opts = []): string
    {
        return $this->do('POST', '/v1/events/bulk', opts: $opts, key: true, stream: self::ndjsonChunks($events))['job_id'];
    }

    /**
     * Follows a job (GET /v1/jobs/{id}) until it is finished (succeeded, failed or canceled) and returns it.
     * Readings start 'interval' seconds apart (default 0.25) and back off (x1.5, up to 'max_interval', default 5)
     * while nothing changes; $onProgress, when given, is called with every reading whose status or counts (done,
     * total, failed_count) changed, the finished job included. 'cancel' and 'timeout' bound the whole wait
     * (CancelledException).
     * @param (callable(array<string, mixed>): void)|null $onProgress
     * @param array{interval?: float, max_interval?: float, timeout?: float, cancel?: callable(): bool} $opts
     * @return array<string, mixed>
     */
    public function waitJob(string $id, ?callable $onProgress = null, array $opts = []): array
    {
        $first = (float) ($opts['interval'] ?? 0.25);
        $most = max((float) ($opts['max_interval'] ?? 5.0), $first);
        $cancel = $opts['cancel'] ?? null;
        $deadline = isset($opts['timeout']) ? microtime(true) + (float) $opts['timeout'] : null;
        $seen = null;
        $wait = $first;
        while (true) {
            $call = $cancel !== null ? ['cancel' => $cancel] : [];
            if ($deadline !== null) {
                $left = $deadline - microtime(true);
                if ($left <= 0) {
                    throw new CancelledException("webhookd: wait for job {$id}: deadline passed", null);
                }
                $call['timeout'] = $left;
            }
            $j = $this->getJob($id, $call);
            $changed = $seen === null;
            foreach (['status', 'done', 'total', 'failed_count'] as $k) {
                $changed = $changed || ($seen[$k] ?? null) !== ($j[$k] ?? null);
            }
            if ($changed && $onProgress !== null) {
                $onProgress($j);
            }
            if (in_array($j['status'] ?? null, ['succeeded', 'failed', 'canceled'], true)) {
                return $j;
            }
            $wait = $changed ? $first : min($wait * 1.5, $most);
            $seen = $j;
            if ($deadline !== null && microtime(true) + $wait > $deadline) {
                throw new CancelledException("webhookd: wait for job {$id}: deadline passed", null);
            }
            $until = microtime(true) + $wait;
            while (($left = $until - microtime(true)) > 0) {
                if ($cancel !== null && $cancel()) {
                    throw new CancelledException("webhookd: wait for job {$id}: cancelled", null);
                }
                usleep((int) (min($left, $cancel !== null ? 0.02 : $left) * 1e6));
            }
        }
    }

    /**
     * The NDJSON lines of $events in chunks of about 64 KiB: one event at a time is read, one chunk held.
     * @param iterable<array<string, mixed>> $events @return \Generator<int, string>
     */
    private static function ndjsonChunks(iterable $events): \Generator
    {
        $buf = '';
        foreach ($events as $e) {
            $buf .= json_encode($e, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES) . "\n";
            if (strlen($buf) >= 65536) {
                yield $buf;
                $buf = '';
            }
        }
        if ($buf !== '') {
            yield $buf;
        }
    }

    /**
     * POST /v1/endpoints/{id}/filter/test: whether the endpoint's filter (or 'filter', one to try before saving
     * it) matches a past event ('event_id') or a given 'type' and 'data'. Sends nothing.
     * @param array<string, mixed> $test @param Options $opts
     */
    public function testEndpointFilter(string $id, array $test, array $opts = []): bool
    {
        return (bool) $this->do('POST', '/v1/endpoints/' . rawurlencode($id) . '/filter/test', body: $test,
            opts: $opts)['match'];
    }

    /**
     * POST /v1/endpoints/{id}/transformation/test: the request the endpoint's transformation (or 'transformation',
     * one to try before saving it; null: none) makes of a past event ('event_id') or a given 'type' and 'data':
     * {send, url, headers, body}, send false when it cancels. Sends nothing. A script that fails throws the
     * validation_failed error on the field transformation.
     * @param array<string, mixed> $test @param Options $opts @return array<string, mixed>
     */
    public function testEndpointTransformation(string $id, array $test, array $opts = []): array
    {
        return $this->do('POST', '/v1/endpoints/' . rawurlencode($id) . '/transformation/test', body: $test,
            opts: $opts);
    }

    // ---- event-type catalog, portal links

    /**
     * POST /v1/event-types: adds an entry to the catalog, with an optional JSON Schema (2020-12)
     * and an example checked against it; 'validate' makes the API refuse events of the type whose
     * data does not match (400 validation_failed naming the failing path). One Idempotency-Key,
     * reused on every retry. Pass a schema with keys, or a \stdClass for {} (an empty PHP array
     * encodes as []).
     * @param array{name: string, description?: string, schema?: array<string, mixed>|\stdClass|bool|null, example?: mixed, validate?: bool} $eventType
     * @param Options $opts @return array<string, mixed> the EventType
     */
    public function createEventType(array $eventType, array $opts = []): array
    {
        return $this->do('POST', '/v1/event-types', body: $eventType, opts: $opts, key: true);
    }

    /**
     * GET /v1/event-types: the catalog by name, every page; archived entries too when $archived.
     * @param Options $opts @return \Generator<int, array<string, mixed>>
     */
    public function listEventTypes(bool $archived = false, ?int $limit = null, array $opts = []): \Generator
    {
        return $this->list('/v1/event-types', ['archived' => $archived ? 'true' : null, 'limit' => $limit], $opts);
    }

    /** GET /v1/event-types/{name}, archived or not. @param Options $opts @return array<string, mixed> */
    public function getEventType(string $name, array $opts = []): array
    {
        return $this->do('GET', '/v1/event-types/' . rawurlencode($name), opts: $opts);
    }

    /**
     * PATCH /v1/event-types/{name}: changes the keys present (null clears description, schema or
     * example; 'archived' => false brings an archived entry back).
     * @param array<string, mixed> $patch @param Options $opts @return array<string, mixed>
     */
    public function updateEventType(string $name, array $patch, array $opts = []): array
    {
        return $this->do('PATCH', '/v1/event-types/' . rawurlencode($name), body: $patch === [] ? new \stdClass() : $patch,
            opts: $opts);
    }

    /**
     * DELETE /v1/event-types/{name}: archives the entry (never deletes it: the name stays taken,
     * events of the type are accepted unchecked) and returns it; archiving it again answers it again.
     * @param Options $opts @return array<string, mixed>
     */
    public function archiveEventType(string $name, array $opts = []): array
    {
        return $this->do('DELETE', '/v1/event-types/' . rawurlencode($name), opts: $opts);
    }

    /**
     * POST /v1/portal-sessions: a one-time link ['url', 'expires_at'] into the integrators' portal
     * for the key's project, valid for $ttl — a duration such as '15m' or '1h', or seconds (60 to
     * 86400); null: the API's default, 15 minutes.
     * @param Options $opts @return array{url: string, expires_at: string}
     */
    public function createPortalSession(string|int|float|null $ttl = null, array $opts = []): array
    {
        $body = $ttl === null || $ttl === '' ? new \stdClass() : ['ttl' => $ttl];
        return $this->do('POST', '/v1/portal-sessions', body: $body, opts: $opts, key: true);
    }

    /** GET /v1/openapi.json. @param Options $opts @return array<string, mixed> */
    public function getOpenAPIDocument(array $opts = []): array
    {
        return $this->do('GET', '/v1/openapi.json', opts: $opts);
    }

    // ---- machinery

    /** @param array<string, mixed> $query @param Options $opts @return \Generator<int, array<string, mixed>> */
    private function list(string $path, array $query, array $opts): \Generator
    {
        $query = array_filter($query, static fn ($v) => $v !== null && $v !== '');
        while (true) {
            $page = $this->do('GET', $path, query: $query, opts: $opts);
            foreach ($page['data'] as $item) {
                yield $item;
            }
            if (($page['next_cursor'] ?? null) === null || $page['next_cursor'] === '') {
                return;
            }
            $query['cursor'] = $page['next_cursor'];
        }
    }

    /**
     * Runs one logical operation, retrying as its kind and the policy allow.
     * @param array<string, mixed> $query @param Options $opts @param list<string> $headers
     */
    private function do(string $method, string $path, mixed $body = null, array $query = [], array $opts = [],
        bool $key = false, bool $safe = true, bool $deleteCall = false, array $headers = [], ?string $ndjson = null,
        bool $ndjsonOut = false, ?\Generator $stream = null): mixed
    {
        if ($key) {
            // One key per logical operation: made once here, sent on every try.
            $headers[] = 'Idempotency-Key: ' . ($opts['idempotency_key'] ?? self::uuid4());
        }
        $cancel = $opts['cancel'] ?? null;
        $deadline = isset($opts['timeout']) ? microtime(true) + (float) $opts['timeout'] : null;
        $last = null;
        $sleep = function (float $seconds) use ($cancel, $deadline, $method, $path, &$last): void {
            if ($deadline !== null && microtime(true) + $seconds > $deadline) {
                throw new CancelledException("webhookd: {$method} {$path}: deadline passed", $last);
            }
            $until = microtime(true) + $seconds;
            while (true) {
                if ($cancel !== null && $cancel()) {
                    throw new CancelledException("webhookd: {$method} {$path}: cancelled", $last);
                }
                $left = $until - microtime(true);
                if ($left <= 0) {
                    return;
                }
                usleep((int) (min($left, $cancel !== null ? 0.02 : $left) * 1e6));
            }
        };
        for ($attempt = 1; ; $attempt++) {
            $this->pacer->wait($sleep);
            [$status, $respHeaders, $respBody, $netErr, $connectErr] = $this->send($method, $path, $body, $query,
                $headers, $cancel, $deadline, $ndjson, $stream);
            $this->pacer->done($status, $respHeaders);
            if ($status !== null && $status < 300 && $ndjsonOut) {
                $lines = array_filter(explode("\n", $respBody), static fn (string $l): bool => trim($l) !== '');
                return array_values(array_map(static fn (string $l): mixed => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $lines));
            }
            if ($status !== null && $status < 300) {
                return $respBody === '' || $status === 204 ? null : json_decode($respBody, true, 512, JSON_THROW_ON_ERROR);
            }
            if ($status !== null) {
                $last = WebhookdException::fromResponse($status, $respHeaders, $respBody, $attempt);
            }
            if ($cancel !== null && $cancel()) {
                throw new CancelledException("webhookd: {$method} {$path}: cancelled", $last);
            }
            $wait = $this->retry->backoff($attempt);
            if ($status === null) {
                $retry = $safe || $connectErr;
            } else {
                if ($deleteCall && $attempt > 1 && $status === 404) {
                    return null; // an earlier try deleted it and its answer was lost
                }
                $retry = $last->isTemporary() && ($safe || $status === 429);
                $ra = RetryPolicy::parseRetryAfter($respHeaders['retry-after'] ?? null);
                if ($ra !== null) {
                    if ($ra > $this->retry->maxRetryAfter) {
                        $retry = false;
                    }
                    $wait = RetryPolicy::afterRetryAfter($ra);
                }
            }
            if ($stream !== null) {
                $retry = false; // its body is spent
            }
            $outOfTime = $deadline !== null && microtime(true) + $wait > $deadline;
            if (!$retry || $attempt >= $this->retry->maxAttempts || $outOfTime) {
                if ($status !== null) {
                    throw $last;
                }
                throw new NetworkException("webhookd: {$method} {$path}: {$attempt} tries: {$netErr}", $attempt, $last);
            }
            $sleep($wait);
        }
    }

    /**
     * One try: [status, headers, body, null, false], or [null, null, '', error, connect failed].
     * @param array<string, mixed> $query @param list<string> $headers
     * @return array{0: ?int, 1: ?array<string, string>, 2: string, 3: ?string, 4: bool}
     */
    private function send(string $method, string $path, mixed $body, array $query, array $headers,
        ?callable $cancel, ?float $deadline, ?string $ndjson = null, ?\Generator $stream = null): array
    {
        $url = $this->baseUrl . $path . ($query !== [] ? '?' . http_build_query($query) : '');
        $timeout = $this->retry->perTryTimeout;
        if ($deadline !== null) {
            $timeout = max(min($timeout, $deadline - microtime(true)), 0.001);
        }
        $headers[] = 'Authorization: Bearer ' . $this->apiKey;
        $headers[] = 'Accept: application/json';
        $headers[] = 'User-Agent: ' . $this->userAgent;
        $respHeaders = [];
        $ch = curl_init($url);
        $options = [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_TIMEOUT_MS => (int) ceil($timeout * 1000),
            CURLOPT_HEADERFUNCTION => static function ($ch, string $line) use (&$respHeaders): int {
                $parts = explode(':', $line, 2);
                if (count($parts) === 2) {
                    $respHeaders[strtolower(trim($parts[0]))] = trim($parts[1]);
                }
                return strlen($line);
            },
        ];
        if ($stream !== null) {
            // curl asks for the body as it sends it: the next chunk of the generator, a slice at a time.
            $headers[] = 'Content-Type: application/x-ndjson';
            $headers[] = 'Transfer-Encoding: chunked';
            $headers[] = 'Expect:'; // no wait for a 100 Continue
            $options[CURLOPT_POST] = true;
            $buf = '';
            $options[CURLOPT_READFUNCTION] = static function ($ch, $fd, int $length) use ($stream, &$buf): string {
                while ($buf === '' && $stream->valid()) {
                    $buf = $stream->current();
                    $stream->next();
                }
                $out = substr($buf, 0, $length);
                $buf = substr($buf, strlen($out));
                return $out; // '' at the end of the events
            };
        } elseif ($ndjson !== null) {
            $headers[] = 'Content-Type: application/x-ndjson';
            $options[CURLOPT_POSTFIELDS] = $ndjson;
        } elseif ($body !== null) {
            $headers[] = 'Content-Type: application/json';
            $options[CURLOPT_POSTFIELDS] = json_encode($body, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES);
        }
        if ($cancel !== null) {
            $options[CURLOPT_NOPROGRESS] = false;
            $options[CURLOPT_XFERINFOFUNCTION] = static fn () => $cancel() ? 1 : 0;
        }
        $options[CURLOPT_HTTPHEADER] = $headers;
        curl_setopt_array($ch, $options);
        $out = curl_exec($ch);
        $errno = curl_errno($ch);
        $status = (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        $error = curl_error($ch);
        curl_close($ch);
        if ($errno !== 0 || !is_string($out)) {
            $connect = in_array($errno, [CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST], true);
            return [null, null, '', "curl error {$errno}: {$error}", $connect];
        }
        return [$status, $respHeaders, $out, null, false];
    }

    private static function uuid4(): string
    {
        $b = random_bytes(16);
        $b[6] = chr((ord($b[6]) & 0x0f) | 0x40);
        $b[8] = chr((ord($b[8]) & 0x3f) | 0x80);
        return vsprintf('%s%s-%s-%s-%s-%s%s%s', str_split(bin2hex($b), 4));
    }
}
