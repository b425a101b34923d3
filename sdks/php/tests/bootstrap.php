<?php
// The tests load the SDK through the autoloader it ships (autoload.php, for
// use without Composer: they run on Debian's phpunit), and their own classes,
// Webhookd\Tests\X, from tests/X.php.
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

spl_autoload_register(static function (string $class): void {
    $prefix = 'Webhookd\\Tests\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
