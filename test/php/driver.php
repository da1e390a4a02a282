<?php

/**
 * Runs one call of the PHP licence client for test/php-client.test.ts and prints the outcome
 * as one JSON object: php -f test/php/driver.php -- '<command as JSON>'.
 */

declare(strict_types=1);

use Svc\Licensing\FileStorage;
use Svc\Licensing\LicenseClient;
use Svc\Licensing\LicenseNetworkException;
use Svc\Licensing\LicenseRefusedException;
use Svc\Licensing\WordPressStorage;

$command = json_decode($argv[1] ?? '', true, 512, JSON_THROW_ON_ERROR);
if (isset($command['wordpress'])) {
    // Stands in for WordPress: options, transients, HTTP API and WP-Cron backed by one JSON file.
    $GLOBALS['svc_wordpress_file'] = $command['wordpress'];
    require __DIR__ . '/wordpress-shim.php';
}
require __DIR__ . '/../../clients/php/LicenseClient.php';

$out = [];
if ($command['action'] === 'vector') {
    $text = LicenseClient::canonicalAnswer($command['answer'], $command['license_key'], $command['site_fingerprint']);
    $ok = LicenseClient::verifySignature($text, $command['answer']['signature']['value'], $command['public_key']);
    echo json_encode(['canonical' => $text, 'verified' => $ok], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
    exit(0);
}

$storage = isset($command['wordpress']) ? new WordPressStorage('svc_licence_') : new FileStorage($command['storage']);
$options = ['timeout' => 3];
if (isset($command['grace_seconds'])) {
    $options['grace_seconds'] = $command['grace_seconds'];
}
if (isset($command['now'])) {
    $options['clock'] = fn (): int => (int) $command['now'];
}
$client = new LicenseClient($command['base_url'], $command['key'], $storage, $command['public_keys'], $options);

try {
    switch ($command['action']) {
        case 'activate':
            $out['result'] = $client->activate($command['site_url'], $command['versions'] ?? []);
            break;
        case 'verify':
            $out['result'] = $client->verify();
            break;
        case 'deactivate':
            $out['result'] = $client->deactivate();
            break;
        case 'fingerprint':
            $out['result'] = $client->siteFingerprint($command['site_url']);
            break;
        case 'cron':
            // A plugin's bootstrap on two page loads (each starts with no hooks), then WP-Cron
            // firing the hook on the second.
            $client->scheduleDailyCheck($command['hook']);
            $GLOBALS['svc_wordpress_actions'] = [];
            $client->scheduleDailyCheck($command['hook']);
            do_action($command['hook']);
            $out['result'] = svc_wordpress_state()['cron'] ?? [];
            break;
        case 'unschedule':
            LicenseClient::unscheduleDailyCheck($command['hook']);
            $out['result'] = svc_wordpress_state()['cron'] ?? [];
            break;
        case 'edition':
            break;
        default:
            throw new LogicException('unknown action ' . $command['action']);
    }
} catch (LicenseRefusedException $e) {
    $out['refused'] = ['status' => $e->status, 'error' => $e->errorCode, 'message' => $e->getMessage(), 'data' => $e->data];
} catch (LicenseNetworkException $e) {
    $out['network_error'] = $e->getMessage();
}
$out['edition'] = $client->edition();
$out['license'] = $client->license();
$out['last_error'] = $client->lastError();
echo json_encode($out, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
