<?php
// The SDK without Composer: require this file, and the classes of the
// Webhookd\ namespace load from src/ (PSR-4, as composer.json declares):
//
//     require '/path/to/webhookd/sdks/php/autoload.php';
//
// With Composer (a path repository), vendor/autoload.php does the same.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'Webhookd\\';
    if (!str_starts_with($class, $prefix)) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
