<?php

declare(strict_types=1);

namespace Webhookd\Tests;

use PHPUnit\Framework\TestCase;
use Webhookd\Client;

final class RoutesTest extends TestCase
{
    public function testEveryRouteOfTheOpenApiDocumentHasAMethod(): void
    {
        $doc = json_decode(file_get_contents(__DIR__ . '/../../../api/openapi.json'), true, 512, JSON_THROW_ON_ERROR);
        $n = 0;
        foreach ($doc['paths'] as $path => $ops) {
            foreach ($ops as $method => $op) {
                if (!in_array($method, ['get', 'post', 'put', 'patch', 'delete'], true) || ($op['x-sdk'] ?? true) === false) {
                    continue; // x-sdk false: a route for webhookd's own CLI (the relay stream of `webhookd listen`)
                }
                $n++;
                $id = $op['operationId'];
                $this->assertArrayHasKey($id, Client::ROUTES, strtoupper($method) . " {$path} ({$id}) has no method in the PHP SDK");
                [$m, $p, $fn] = Client::ROUTES[$id];
                $this->assertSame(strtoupper($method) . " {$path}", "{$m} {$p}", $id);
                $this->assertTrue(method_exists(Client::class, $fn), "Client::{$fn} is missing");
            }
        }
        $this->assertCount($n, Client::ROUTES, 'ROUTES names an operation the document does not have');
    }
}
