<?php

/**
 * The few WordPress functions the licence client calls, for tests that run it outside WordPress:
 * options, transients, the HTTP API (wp_remote_post / wp_remote_get over PHP streams) and WP-Cron,
 * all kept in one JSON file so that the test can read what the client stored and called.
 */

declare(strict_types=1);

define('ABSPATH', '/var/www/html/');
define('DAY_IN_SECONDS', 86400);

final class WP_Error
{
    public function __construct(public string $message)
    {
    }
}

function svc_wordpress_state(): array
{
    $text = @file_get_contents($GLOBALS['svc_wordpress_file']);
    $state = is_string($text) ? json_decode($text, true) : null;
    return is_array($state) ? $state : [];
}

function svc_wordpress_save(array $state): void
{
    file_put_contents($GLOBALS['svc_wordpress_file'], json_encode($state, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
}

function get_option(string $name, mixed $default = false): mixed
{
    return svc_wordpress_state()['options'][$name]['value'] ?? $default;
}

function update_option(string $name, mixed $value, bool $autoload = true): bool
{
    $state = svc_wordpress_state();
    $state['options'][$name] = ['value' => $value, 'autoload' => $autoload];
    svc_wordpress_save($state);
    return true;
}

function delete_option(string $name): bool
{
    $state = svc_wordpress_state();
    unset($state['options'][$name]);
    svc_wordpress_save($state);
    return true;
}

function set_transient(string $name, mixed $value, int $expiration = 0): bool
{
    $state = svc_wordpress_state();
    $state['transients'][$name] = ['value' => $value, 'expires' => $expiration ? time() + $expiration : 0];
    $state['transients_set'][] = $name;
    svc_wordpress_save($state);
    return true;
}

function get_transient(string $name): mixed
{
    $entry = svc_wordpress_state()['transients'][$name] ?? null;
    return $entry === null || ($entry['expires'] && $entry['expires'] <= time()) ? false : $entry['value'];
}

function delete_transient(string $name): bool
{
    $state = svc_wordpress_state();
    unset($state['transients'][$name]);
    svc_wordpress_save($state);
    return true;
}

function home_url(): string
{
    return $GLOBALS['svc_home_url'] ?? 'https://wp-site.example';
}

function register_deactivation_hook(string $file, callable $callback): void
{
    $GLOBALS['svc_wordpress_deactivation'][$file] = $callback;
}

function get_bloginfo(string $show): string
{
    return $show === 'version' ? '6.6.2' : '';
}

function svc_wordpress_http(string $method, string $url, array $args): array|WP_Error
{
    $state = svc_wordpress_state();
    $state['http'][] = "{$method} {$url}";
    svc_wordpress_save($state);
    $headers = '';
    foreach ($args['headers'] ?? [] as $name => $value) {
        $headers .= "{$name}: {$value}\r\n";
    }
    $http = ['method' => $method, 'timeout' => $args['timeout'] ?? 5, 'ignore_errors' => true, 'header' => $headers];
    if (isset($args['body'])) {
        $http['header'] .= "Content-Type: application/x-www-form-urlencoded\r\n";
        $http['content'] = http_build_query($args['body']);
    }
    $body = @file_get_contents($url, false, stream_context_create(['http' => $http]));
    if ($body === false || !isset($http_response_header[0])) {
        return new WP_Error('http_request_failed');
    }
    preg_match('#^HTTP/\S+\s+(\d{3})#', $http_response_header[0], $status);
    $responseHeaders = [];
    foreach (array_slice($http_response_header, 1) as $line) {
        [$name, $value] = array_map('trim', explode(':', $line, 2)) + [1 => ''];
        $responseHeaders[strtolower($name)] = $value;
    }
    return ['response' => ['code' => (int) $status[1]], 'body' => $body, 'headers' => $responseHeaders];
}

function wp_remote_post(string $url, array $args = []): array|WP_Error
{
    return svc_wordpress_http('POST', $url, $args);
}

function wp_remote_get(string $url, array $args = []): array|WP_Error
{
    return svc_wordpress_http('GET', $url, $args);
}

function is_wp_error(mixed $thing): bool
{
    return $thing instanceof WP_Error;
}

function wp_remote_retrieve_response_code(array|WP_Error $response): int|string
{
    return is_array($response) ? $response['response']['code'] : '';
}

function wp_remote_retrieve_body(array|WP_Error $response): string
{
    return is_array($response) ? $response['body'] : '';
}

function wp_remote_retrieve_header(array|WP_Error $response, string $header): string
{
    return is_array($response) ? ($response['headers'][strtolower($header)] ?? '') : '';
}

$GLOBALS['svc_wordpress_actions'] = [];

function add_action(string $hook, callable $callback): bool
{
    $GLOBALS['svc_wordpress_actions'][$hook][] = $callback;
    return true;
}

function do_action(string $hook): void
{
    foreach ($GLOBALS['svc_wordpress_actions'][$hook] ?? [] as $callback) {
        $callback();
    }
}

function wp_next_scheduled(string $hook): int|false
{
    return svc_wordpress_state()['cron'][$hook]['timestamp'] ?? false;
}

function wp_schedule_event(int $timestamp, string $recurrence, string $hook): bool
{
    $state = svc_wordpress_state();
    $state['cron'][$hook] = ['timestamp' => $timestamp, 'recurrence' => $recurrence, 'scheduled' => ($state['cron'][$hook]['scheduled'] ?? 0) + 1];
    svc_wordpress_save($state);
    return true;
}

function wp_clear_scheduled_hook(string $hook): int
{
    $state = svc_wordpress_state();
    $had = isset($state['cron'][$hook]) ? 1 : 0;
    unset($state['cron'][$hook]);
    svc_wordpress_save($state);
    return $had;
}
