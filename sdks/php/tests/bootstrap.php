<?php
// PSR-4 autoloading without Composer (the tests run on Debian's phpunit):
// Webhookd\X is src/X.php, Webhookd\Tests\X is tests/X.php.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    foreach (['Webhookd\\Tests\\' => __DIR__ . '/', 'Webhookd\\' => __DIR__ . '/../src/'] as $prefix => $dir) {
        if (str_starts_with($class, $prefix)) {
            $file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
            if (is_file($file)) {
                require $file;
            }
            return;
        }
    }
});
