<?php

/**
 * Licence client for plugins: activate, verify and deactivate a licence key against the
 * licence service, with signed answers that can be trusted offline for a grace period.
 *
 * One file, PHP 8.1+, no Composer dependency. Copy it into your plugin and rename the namespace
 * (see README.md next to this file). It holds several small classes, so that copying one file is
 * all it takes.
 *
 * Rules (the same as the service's TypeScript client):
 * - A network error, a timeout, a 5xx, a 429 or a page that is not the protocol is "no news": the
 *   stored answer and edition stay as they were. Only a definitive answer changes them.
 * - A 200 answer counts only when it carries an Ed25519 signature, by a key you pinned (or one
 *   it endorsed), over this licence key and this site's fingerprint. A forged local response is
 *   therefore no news, and a stored answer that was edited no longer verifies.
 */

declare(strict_types=1);

namespace Svc\Licensing;

use DateTimeImmutable;
use DateTimeZone;
use JsonException;
use LogicException;
use RuntimeException;

/**
 * Where the client keeps its state: the site secret, the site URL, the last signed answer and the
 * keys it learnt. Values are strings (the client stores JSON).
 */
interface Storage
{
    public function get(string $name): ?string;

    public function set(string $name, string $value): void;

    public function delete(string $name): void;

    /** A short-lived value (a lock); it reads as null once $seconds have passed. */
    public function setTemporary(string $name, string $value, int $seconds): void;

    public function getTemporary(string $name): ?string;

    public function deleteTemporary(string $name): void;
}

/** WordPress options (not autoloaded) for the state, transients for the lock. */
final class WordPressStorage implements Storage
{
    public function __construct(private string $prefix)
    {
    }

    public function get(string $name): ?string
    {
        $value = get_option($this->prefix . $name, null);
        return is_string($value) ? $value : null;
    }

    public function set(string $name, string $value): void
    {
        update_option($this->prefix . $name, $value, false);
    }

    public function delete(string $name): void
    {
        delete_option($this->prefix . $name);
    }

    public function setTemporary(string $name, string $value, int $seconds): void
    {
        set_transient($this->prefix . $name, $value, $seconds);
    }

    public function getTemporary(string $name): ?string
    {
        $value = get_transient($this->prefix . $name);
        return is_string($value) ? $value : null;
    }

    public function deleteTemporary(string $name): void
    {
        delete_transient($this->prefix . $name);
    }
}

/** A JSON file, locked while it is read and written; for tests and code outside WordPress. */
final class FileStorage implements Storage
{
    public function __construct(private string $path)
    {
    }

    public function get(string $name): ?string
    {
        $values = $this->update(null);
        return isset($values['values'][$name]) && is_string($values['values'][$name]) ? $values['values'][$name] : null;
    }

    public function set(string $name, string $value): void
    {
        $this->update(function (array $data) use ($name, $value): array {
            $data['values'][$name] = $value;
            return $data;
        });
    }

    public function delete(string $name): void
    {
        $this->update(function (array $data) use ($name): array {
            unset($data['values'][$name]);
            return $data;
        });
    }

    public function setTemporary(string $name, string $value, int $seconds): void
    {
        $this->update(function (array $data) use ($name, $value, $seconds): array {
            $data['temporary'][$name] = ['value' => $value, 'until' => time() + $seconds];
            return $data;
        });
    }

    public function getTemporary(string $name): ?string
    {
        $entry = $this->update(null)['temporary'][$name] ?? null;
        if (!is_array($entry) || !is_string($entry['value'] ?? null) || (int) ($entry['until'] ?? 0) <= time()) {
            return null;
        }
        return $entry['value'];
    }

    public function deleteTemporary(string $name): void
    {
        $this->update(function (array $data) use ($name): array {
            unset($data['temporary'][$name]);
            return $data;
        });
    }

    /** Reads the file under a lock and, with $change, writes the changed data back. */
    private function update(?callable $change): array
    {
        $handle = fopen($this->path, 'c+');
        if ($handle === false) {
            throw new RuntimeException("Cannot open {$this->path}");
        }
        try {
            flock($handle, $change === null ? LOCK_SH : LOCK_EX);
            $text = stream_get_contents($handle);
            $data = is_string($text) && $text !== '' ? json_decode($text, true) : null;
            $data = is_array($data) ? $data + ['values' => [], 'temporary' => []] : ['values' => [], 'temporary' => []];
            if ($change !== null) {
                $data = $change($data);
                ftruncate($handle, 0);
                rewind($handle);
                fwrite($handle, json_encode($data, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR));
                fflush($handle);
            }
            return $data;
        } finally {
            flock($handle, LOCK_UN);
            fclose($handle);
        }
    }
}

/** An HTTP answer: its status, its JSON body (null when it is not a JSON object) and Retry-After. */
final class HttpAnswer
{
    public function __construct(
        public readonly int $status,
        public readonly ?array $body,
        public readonly ?int $retryAfter = null,
    ) {
    }
}

/** Sends requests; null means no answer at all (refused, unreachable, timed out). */
interface Transport
{
    /** @param array<string, string> $form */
    public function post(string $url, array $form, int $timeoutSeconds): ?HttpAnswer;

    public function get(string $url, int $timeoutSeconds): ?HttpAnswer;
}

/** wp_remote_post / wp_remote_get inside WordPress, PHP's HTTP stream wrapper elsewhere. */
final class HttpTransport implements Transport
{
    public function post(string $url, array $form, int $timeoutSeconds): ?HttpAnswer
    {
        if (function_exists('wp_remote_post')) {
            return self::fromWordPress(wp_remote_post($url, [
                'body' => $form,
                'timeout' => $timeoutSeconds,
                'redirection' => 0,
                'headers' => ['Accept' => 'application/json'],
            ]));
        }
        return self::fromStream($url, [
            'method' => 'POST',
            'header' => "Content-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n",
            'content' => http_build_query($form, '', '&', PHP_QUERY_RFC3986),
            'timeout' => $timeoutSeconds,
        ]);
    }

    public function get(string $url, int $timeoutSeconds): ?HttpAnswer
    {
        if (function_exists('wp_remote_get')) {
            return self::fromWordPress(wp_remote_get($url, [
                'timeout' => $timeoutSeconds,
                'redirection' => 0,
                'headers' => ['Accept' => 'application/json'],
            ]));
        }
        return self::fromStream($url, [
            'method' => 'GET',
            'header' => "Accept: application/json\r\n",
            'timeout' => $timeoutSeconds,
        ]);
    }

    private static function fromWordPress(mixed $response): ?HttpAnswer
    {
        if (is_wp_error($response)) {
            return null;
        }
        $retryAfter = wp_remote_retrieve_header($response, 'retry-after');
        return new HttpAnswer(
            (int) wp_remote_retrieve_response_code($response),
            self::decode((string) wp_remote_retrieve_body($response)),
            is_numeric($retryAfter) ? (int) $retryAfter : null,
        );
    }

    private static function fromStream(string $url, array $http): ?HttpAnswer
    {
        $context = stream_context_create(['http' => $http + ['ignore_errors' => true, 'follow_location' => 0]]);
        $previous = ini_set('default_socket_timeout', (string) $http['timeout']);
        try {
            $text = @file_get_contents($url, false, $context);
            $headers = function_exists('http_get_last_response_headers')
                ? http_get_last_response_headers()
                : ($http_response_header ?? null);
        } finally {
            if ($previous !== false) {
                ini_set('default_socket_timeout', $previous);
            }
        }
        $statusLine = is_array($headers) ? (string) ($headers[0] ?? '') : '';
        if ($text === false || !preg_match('#^HTTP/\S+\s+(\d{3})#', $statusLine, $status)) {
            return null;
        }
        $retryAfter = null;
        foreach ($headers as $line) {
            if (preg_match('/^retry-after:\s*(\d+)/i', (string) $line, $match)) {
                $retryAfter = (int) $match[1];
            }
        }
        return new HttpAnswer((int) $status[1], self::decode($text), $retryAfter);
    }

    private static function decode(string $text): ?array
    {
        try {
            $body = json_decode($text, true, 32, JSON_THROW_ON_ERROR);
        } catch (JsonException) {
            return null;
        }
        return is_array($body) && !array_is_list($body) ? $body : null;
    }
}

/** The service definitively refused the request (its error code is in $errorCode). */
final class LicenseRefusedException extends RuntimeException
{
    public function __construct(
        public readonly int $status,
        public readonly string $errorCode,
        string $message,
        public readonly array $data = [],
    ) {
        parent::__construct($message);
    }
}

/** No definitive answer: unreachable, a timeout, a 5xx or 429, an unsigned or forged answer. */
final class LicenseNetworkException extends RuntimeException
{
}

final class LicenseClient
{
    public const LICENSED = 'licensed';
    public const UNLICENSED = 'unlicensed';
    public const UNKNOWN = 'unknown';

    /** Codes with which the service definitively refuses a licence on verify. */
    public const REFUSALS = ['license_not_found', 'license_inactive', 'license_expired'];

    private const ANSWER_FORMAT = 'svc-licence-answer/v1';
    private const KEY_FORMAT = 'svc-licence-key/v1';
    /** Signed times may run this far ahead of the site's clock. */
    private const CLOCK_SKEW = 300;
    private const LOCK_SECONDS = 60;

    private string $baseUrl;
    private Transport $transport;
    private int $graceSeconds;
    private int $timeout;
    /** @var callable(): int */
    private $clock;
    /** @var list<array{key_id: string, public_key: string}> */
    private array $pinnedKeys;

    /**
     * @param string $baseUrl     The licence service, e.g. https://licences.example.com
     * @param string $licenseKey  The customer's licence key (or its reference id)
     * @param list<array{key_id: string, public_key: string}> $publicKeys The service's public
     *        keys as `svc license keys` prints them; pin at least the current one
     * @param array{grace_seconds?: int, timeout?: int, transport?: Transport, clock?: callable(): int} $options
     *        grace_seconds: how long a signed answer is trusted without news (default 7 days;
     *        never beyond the signature's own valid_until); timeout: seconds per request (10)
     */
    public function __construct(
        string $baseUrl,
        private string $licenseKey,
        private Storage $storage,
        array $publicKeys,
        array $options = [],
    ) {
        if (!function_exists('sodium_crypto_sign_verify_detached')) {
            throw new LogicException('Checking signed answers needs the sodium extension (bundled since PHP 7.2)');
        }
        $this->pinnedKeys = [];
        foreach ($publicKeys as $key) {
            if (!is_string($key['key_id'] ?? null) || !is_string($key['public_key'] ?? null)) {
                throw new LogicException('Each public key needs key_id and public_key (`svc license keys`)');
            }
            $this->pinnedKeys[] = ['key_id' => $key['key_id'], 'public_key' => $key['public_key']];
        }
        if ($this->pinnedKeys === []) {
            throw new LogicException('Pin at least one public key of the service (`svc license keys`)');
        }
        $this->baseUrl = rtrim($baseUrl, '/');
        $this->transport = $options['transport'] ?? new HttpTransport();
        $this->graceSeconds = (int) ($options['grace_seconds'] ?? 7 * 86400);
        $this->timeout = (int) ($options['timeout'] ?? 10);
        $this->clock = $options['clock'] ?? 'time';
    }

    /**
     * This site's fingerprint: SHA-256 of its home URL and a secret generated once per site and
     * kept in the storage, so nobody can compute another site's fingerprint from its URL.
     */
    public function siteFingerprint(string $homeUrl): string
    {
        $secret = $this->storage->get('site_secret');
        if ($secret === null) {
            $secret = bin2hex(random_bytes(32));
            $this->storage->set('site_secret', $secret);
        }
        return hash('sha256', $homeUrl . $secret);
    }

    /**
     * Activates this site. A signed answer makes the edition licensed at once.
     *
     * @param array{wp_version?: string, php_version?: string, plugin_version?: string} $versions
     * @return array{activation_id: string, reactivated: bool}
     * @throws LicenseRefusedException the service refused (site_limit_reached, license_expired, ...)
     * @throws LicenseNetworkException no definitive answer; nothing was changed
     */
    public function activate(string $siteUrl, array $versions = []): array
    {
        $fingerprint = $this->siteFingerprint($siteUrl);
        $form = ['site_url' => $siteUrl, 'site_fingerprint' => $fingerprint];
        if ($versions === [] && defined('ABSPATH')) {
            $versions = ['wp_version' => (string) get_bloginfo('version'), 'php_version' => PHP_VERSION];
        }
        foreach (['wp_version', 'php_version', 'plugin_version'] as $field) {
            if (isset($versions[$field]) && $versions[$field] !== '') {
                $form[$field] = (string) $versions[$field];
            }
        }
        $data = $this->dataOf($this->post('activate', $form), 'activate');
        $license = self::licenseFrom($data['license'] ?? null);
        $signature = self::signatureFrom($data['signature'] ?? null);
        if (!is_string($data['activation_id'] ?? null) || $license === null || $signature === null) {
            throw new LicenseNetworkException('activate: the answer is not a signed activation');
        }
        $answer = [
            'action' => 'activate',
            'license' => $license,
            'activation' => [
                'activation_id' => $data['activation_id'],
                'reactivated' => ($data['reactivated'] ?? false) === true,
            ],
            'signature' => $signature,
        ];
        $keys = $this->trust($answer, $fingerprint);
        if ($keys === null) {
            throw new LicenseNetworkException('activate: the answer is not signed by a trusted key');
        }
        if (!$this->fresh($answer)) {
            throw new LicenseNetworkException('activate: the signed answer is out of date');
        }
        $this->storage->set('site_url', $siteUrl);
        $this->save(['edition' => self::LICENSED, 'answer' => $answer, 'keys' => $keys]);
        return $answer['activation'];
    }

    /**
     * Asks the service about the licence. Never throws: answers
     * `['kind' => 'valid', 'license' => [...]]`, `['kind' => 'refused', 'error' => code]` or
     * `['kind' => 'no_news', 'reason' => text]`; the stored edition moves only on the first two.
     */
    public function verify(): array
    {
        if ($this->storage->getTemporary('check_lock') !== null) {
            return ['kind' => 'no_news', 'reason' => 'another check is running'];
        }
        $this->storage->setTemporary('check_lock', '1', self::LOCK_SECONDS);
        try {
            return $this->check();
        } finally {
            $this->storage->deleteTemporary('check_lock');
        }
    }

    /**
     * Deactivates this site, freeing its slot; afterwards the edition is unlicensed.
     *
     * @return array{activation_id: string, slot_freed: bool}
     * @throws LicenseRefusedException activation_not_found, already_deactivated, license_not_found
     * @throws LicenseNetworkException no definitive answer; nothing was changed
     */
    public function deactivate(): array
    {
        $siteUrl = $this->storage->get('site_url');
        if ($siteUrl === null) {
            throw new LogicException('This site was never activated');
        }
        $form = ['site_fingerprint' => $this->siteFingerprint($siteUrl)];
        $data = $this->dataOf($this->post('deactivate', $form), 'deactivate');
        $this->save(['edition' => self::UNLICENSED, 'error' => 'deactivated', 'keys' => $this->state()['keys'] ?? []]);
        return [
            'activation_id' => (string) ($data['activation_id'] ?? ''),
            'slot_freed' => ($data['slot_freed'] ?? false) === true,
        ];
    }

    /**
     * The edition to act on now, without asking the service: licensed only while the stored
     * answer verifies, names this licence key and site, is within the grace period and the
     * signature's validity, and the licence has not expired. A stored answer failing any of these
     * (edited, stale) reads unknown.
     */
    public function edition(): string
    {
        $state = $this->state();
        $edition = $state['edition'] ?? self::UNKNOWN;
        if ($edition !== self::LICENSED) {
            return in_array($edition, [self::UNLICENSED, self::UNKNOWN], true) ? $edition : self::UNKNOWN;
        }
        return $this->answerHolds($state) ? self::LICENSED : self::UNKNOWN;
    }

    public function isLicensed(): bool
    {
        return $this->edition() === self::LICENSED;
    }

    /** The licence as the last trusted answer describes it, or null. */
    public function license(): ?array
    {
        return $this->isLicensed() ? $this->state()['answer']['license'] : null;
    }

    /** The error code of the last definitive refusal (or `deactivated`), or null. */
    public function lastError(): ?string
    {
        $error = $this->state()['error'] ?? null;
        return is_string($error) ? $error : null;
    }

    /**
     * Runs verify() once a day through WP-Cron. Call it on every load of the plugin (it hooks
     * the check) and unscheduleDailyCheck() from the plugin's deactivation hook.
     */
    public function scheduleDailyCheck(string $hook): void
    {
        if (!function_exists('wp_schedule_event')) {
            throw new LogicException('WP-Cron needs WordPress');
        }
        add_action($hook, function (): void {
            $this->verify();
        });
        if (wp_next_scheduled($hook) === false) {
            // Spread the sites' checks over the day instead of all at midnight.
            wp_schedule_event(($this->clock)() + random_int(60, 86400), 'daily', $hook);
        }
    }

    public static function unscheduleDailyCheck(string $hook): void
    {
        wp_clear_scheduled_hook($hook);
    }

    /** The exact text an answer's signature covers (docs/licences.md, "Canonical form"). */
    public static function canonicalAnswer(array $answer, string $licenseKey, string $siteFingerprint): string
    {
        $signature = $answer['signature'];
        $license = $answer['license'];
        $fields = [
            'alg' => $signature['alg'],
            'key_id' => $signature['key_id'],
            'issued_at' => $signature['issued_at'],
            'valid_until' => $signature['valid_until'],
            'action' => $answer['action'],
            'license_key' => $licenseKey,
            'site_fingerprint' => $siteFingerprint,
            'license_status' => $license['license_status'],
            'expires_at' => $license['expires_at'] ?? '',
            'domain_limit' => (string) $license['domain_limit'],
            'site_match' => $license['site_match'] ? 'true' : 'false',
            'product_slug' => $license['product_slug'],
            'product_name' => $license['product_name'],
        ];
        if ($answer['action'] === 'activate') {
            $fields['activation_id'] = $answer['activation']['activation_id'];
            $fields['reactivated'] = $answer['activation']['reactivated'] ? 'true' : 'false';
        }
        $lines = [self::ANSWER_FORMAT];
        foreach ($fields as $name => $value) {
            $lines[] = $name . '=' . rawurlencode((string) $value);
        }
        return implode("\n", $lines);
    }

    /** The text a retiring key signs to endorse its successor. */
    public static function canonicalKey(array $key): string
    {
        return implode("\n", [
            self::KEY_FORMAT,
            'key_id=' . rawurlencode($key['key_id']),
            'public_key=' . rawurlencode($key['public_key']),
            'created_at=' . rawurlencode($key['created_at']),
        ]);
    }

    public static function verifySignature(string $text, string $signature, string $publicKey): bool
    {
        $signatureBytes = base64_decode($signature, true);
        $keyBytes = base64_decode($publicKey, true);
        if (!is_string($signatureBytes) || !is_string($keyBytes)) {
            return false;
        }
        $sizesRight = strlen($signatureBytes) === SODIUM_CRYPTO_SIGN_BYTES
            && strlen($keyBytes) === SODIUM_CRYPTO_SIGN_PUBLICKEYBYTES;
        if (!$sizesRight) {
            return false;
        }
        return sodium_crypto_sign_verify_detached($signatureBytes, $text, $keyBytes);
    }

    private function check(): array
    {
        $siteUrl = $this->storage->get('site_url');
        $fingerprint = $siteUrl === null ? '' : $this->siteFingerprint($siteUrl);
        // With its home URL the service matches the fingerprint only for the domain it was activated for.
        $answer = $this->post('verify', $fingerprint === '' ? [] : ['site_fingerprint' => $fingerprint, 'site_url' => $siteUrl]);
        if ($answer === null) {
            return ['kind' => 'no_news', 'reason' => 'the service could not be reached'];
        }
        $body = $answer->body ?? [];
        if ($answer->status === 200 && ($body['status'] ?? null) === 'ok') {
            $license = self::licenseFrom($body);
            $signature = self::signatureFrom($body['signature'] ?? null);
            $signed = $license === null || $signature === null
                ? null
                : ['action' => 'verify', 'license' => $license, 'signature' => $signature];
            $keys = $signed === null ? null : $this->trust($signed, $fingerprint);
            if ($keys === null) {
                return ['kind' => 'no_news', 'reason' => 'the answer is not signed by a trusted key'];
            }
            if (!$this->fresh($signed)) {
                return [
                    'kind' => 'no_news',
                    'reason' => 'the signed answer is out of date (older than what this site knows, '
                        . 'or past its validity)',
                ];
            }
            $matches = $fingerprint !== '' && $license['site_match'];
            $this->save($matches
                ? ['edition' => self::LICENSED, 'answer' => $signed, 'keys' => $keys]
                : ['edition' => self::UNLICENSED, 'error' => 'site_not_active', 'keys' => $keys]);
            return ['kind' => 'valid', 'license' => $license];
        }
        $error = $body['error'] ?? null;
        $refused = in_array($answer->status, [403, 404], true) && ($body['status'] ?? null) === 'fail';
        if ($refused && in_array($error, self::REFUSALS, true)) {
            $this->save(['edition' => self::UNLICENSED, 'error' => $error, 'keys' => $this->state()['keys'] ?? []]);
            return ['kind' => 'refused', 'error' => $error, 'message' => (string) ($body['message'] ?? $error)];
        }
        // 429, 5xx, a proxy's page, a malformed request: nothing was learnt about the licence.
        $code = is_string($error) ? " ({$error})" : '';
        return ['kind' => 'no_news', 'reason' => "unexpected answer {$answer->status}{$code}"];
    }

    private function post(string $action, array $form): ?HttpAnswer
    {
        $url = $this->baseUrl . '/api/portal/v1/licenses/' . rawurlencode($this->licenseKey) . '/' . $action;
        return $this->transport->post($url, $form, $this->timeout);
    }

    /** The data of a success envelope; a refusal or anything else throws. */
    private function dataOf(?HttpAnswer $answer, string $action): array
    {
        if ($answer === null) {
            throw new LicenseNetworkException("{$action}: the service could not be reached");
        }
        $body = $answer->body ?? [];
        if ($answer->status === 200 && ($body['status'] ?? null) === 'ok' && is_array($body['data'] ?? null)) {
            return $body['data'];
        }
        // 429 and 5xx are not refusals of the licence: no news, retry later.
        $clientError = $answer->status >= 400 && $answer->status < 500 && $answer->status !== 429;
        if ($clientError && ($body['status'] ?? null) === 'fail' && is_string($body['error'] ?? null)) {
            $data = is_array($body['data'] ?? null) ? $body['data'] : [];
            $message = (string) ($body['message'] ?? $body['error']);
            throw new LicenseRefusedException($answer->status, $body['error'], $message, $data);
        }
        $retry = $answer->retryAfter === null ? '' : ", retry after {$answer->retryAfter} s";
        throw new LicenseNetworkException("{$action}: unexpected answer {$answer->status}{$retry}");
    }

    private function state(): array
    {
        $text = $this->storage->get('state');
        $state = $text === null ? null : json_decode($text, true);
        return is_array($state) ? $state : [];
    }

    private function save(array $state): void
    {
        $state['checked_at'] = gmdate('Y-m-d\TH:i:s\Z', ($this->clock)());
        $flags = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR;
        $this->storage->set('state', json_encode($state, $flags));
    }

    /**
     * Whether a signed answer that just arrived is news: its signature is current, and it was
     * issued no earlier than the stored answer, nor (beyond clock skew) before a refusal this
     * site has already heard. An old answer played back by a proxy or a hosts-file entry is
     * never taken for the service's word now, and cannot undo a revocation.
     */
    private function fresh(array $answer): bool
    {
        if (!self::signatureCurrent($answer, ($this->clock)())) {
            return false;
        }
        $issued = self::parseTime($answer['signature']['issued_at'], 'Y-m-d\TH:i:s\Z');
        $state = $this->state();
        $kept = self::answerFrom($state['answer'] ?? null);
        if ($kept !== null) {
            $keptIssued = self::parseTime($kept['signature']['issued_at'], 'Y-m-d\TH:i:s\Z');
            if ($keptIssued !== null && $issued < $keptIssued) {
                return false;
            }
        }
        $refusedAt = isset($state['error'], $state['checked_at']) && is_string($state['checked_at'])
            ? self::parseTime($state['checked_at'], 'Y-m-d\TH:i:s\Z')
            : null;
        return $refusedAt === null || $issued >= $refusedAt - self::CLOCK_SKEW;
    }

    /**
     * Whether $now lies in the signature's window: from its issue (less clock skew) to its
     * valid_until, and within $grace seconds of its issue when given.
     */
    private static function signatureCurrent(array $answer, int $now, ?int $grace = null): bool
    {
        $issued = self::parseTime($answer['signature']['issued_at'], 'Y-m-d\TH:i:s\Z');
        $validUntil = self::parseTime($answer['signature']['valid_until'], 'Y-m-d\TH:i:s\Z');
        if ($issued === null || $validUntil === null) {
            return false;
        }
        $end = $grace === null ? $validUntil : min($issued + $grace, $validUntil);
        return $now >= $issued - self::CLOCK_SKEW && $now < $end;
    }

    /** Every check of a stored answer except those that need the service. */
    private function answerHolds(array $state): bool
    {
        $answer = self::answerFrom($state['answer'] ?? null);
        $siteUrl = $this->storage->get('site_url');
        if ($answer === null || $siteUrl === null) {
            return false;
        }
        $keys = is_array($state['keys'] ?? null) ? $state['keys'] : [];
        if (!$this->signedByTrustedKey($answer, $this->siteFingerprint($siteUrl), $this->knownKeys($keys))) {
            return false;
        }
        $now = ($this->clock)();
        if (!self::signatureCurrent($answer, $now, $this->graceSeconds)) {
            return false;
        }
        if (!$answer['license']['site_match']) {
            return false;
        }
        $expires = $answer['license']['expires_at'];
        return $expires === null || (($at = self::parseTime($expires, 'Y-m-d H:i:s')) !== null && $now < $at);
    }

    /**
     * The stored keys to keep when a fresh answer is signed by a trusted key, asking the service
     * for its keys when the signing key is new; null when the answer is not trusted.
     */
    private function trust(array $answer, string $fingerprint): ?array
    {
        $state = $this->state();
        $kept = is_array($state['keys'] ?? null) ? $state['keys'] : [];
        if ($this->signedByTrustedKey($answer, $fingerprint, $this->knownKeys($kept))) {
            return $kept;
        }
        $listing = $this->transport->get($this->baseUrl . '/api/portal/v1/keys', $this->timeout);
        $items = $listing?->body['data']['items'] ?? null;
        if (!is_array($items)) {
            return null;
        }
        $learnt = [];
        foreach (array_merge($kept, $items) as $key) {
            $complete = is_array($key)
                && is_string($key['key_id'] ?? null)
                && is_string($key['public_key'] ?? null)
                && is_string($key['created_at'] ?? null);
            if ($complete) {
                $learnt[$key['key_id']] ??= [
                    'key_id' => $key['key_id'],
                    'public_key' => $key['public_key'],
                    'created_at' => $key['created_at'],
                    'endorsement' => is_array($key['endorsement'] ?? null) ? $key['endorsement'] : null,
                ];
            }
        }
        // Keep only what the pinned keys vouch for; a stored list is checked again on every use.
        $trusted = array_column($this->trustedKeys(array_values($learnt)), 'key_id');
        $keep = array_values(array_filter($learnt, fn (array $key): bool => in_array($key['key_id'], $trusted, true)));
        return $this->signedByTrustedKey($answer, $fingerprint, $this->knownKeys($keep)) ? $keep : null;
    }

    /** The pinned keys and the stored keys they endorse. */
    private function knownKeys(array $stored): array
    {
        return $this->trustedKeys($stored);
    }

    /** The pinned keys, and every listed key endorsed by a trusted one, along the chain of rotations. */
    private function trustedKeys(array $listed): array
    {
        $trusted = [];
        foreach ($this->pinnedKeys as $key) {
            $trusted[$key['key_id']] = $key;
        }
        do {
            $grew = false;
            foreach ($listed as $key) {
                if (!is_array($key) || !is_string($key['key_id'] ?? null) || isset($trusted[$key['key_id']])) {
                    continue;
                }
                $endorsement = $key['endorsement'] ?? null;
                $endorser = is_array($endorsement) && is_string($endorsement['key_id'] ?? null)
                    ? ($trusted[$endorsement['key_id']] ?? null)
                    : null;
                if (
                    $endorser === null
                    || !is_string($endorsement['value'] ?? null)
                    || !is_string($key['public_key'] ?? null)
                    || !is_string($key['created_at'] ?? null)
                    || self::keyIdOf($key['public_key']) !== $key['key_id']
                    || !self::verifySignature(self::canonicalKey($key), $endorsement['value'], $endorser['public_key'])
                ) {
                    continue;
                }
                $trusted[$key['key_id']] = ['key_id' => $key['key_id'], 'public_key' => $key['public_key']];
                $grew = true;
            }
        } while ($grew);
        return array_values($trusted);
    }

    private function signedByTrustedKey(array $answer, string $fingerprint, array $keys): bool
    {
        foreach ($keys as $key) {
            if ($key['key_id'] === $answer['signature']['key_id']) {
                $text = self::canonicalAnswer($answer, $this->licenseKey, $fingerprint);
                return self::verifySignature($text, $answer['signature']['value'], $key['public_key']);
            }
        }
        return false;
    }

    /** A stored answer in the shape the client writes, or null. */
    private static function answerFrom(mixed $value): ?array
    {
        if (!is_array($value) || !in_array($value['action'] ?? null, ['activate', 'verify'], true)) {
            return null;
        }
        $license = self::licenseFrom($value['license'] ?? null);
        $signature = self::signatureFrom($value['signature'] ?? null);
        if ($license === null || $signature === null) {
            return null;
        }
        $answer = ['action' => $value['action'], 'license' => $license, 'signature' => $signature];
        if ($value['action'] === 'activate') {
            $activation = $value['activation'] ?? null;
            if (
                !is_array($activation)
                || !is_string($activation['activation_id'] ?? null)
                || !is_bool($activation['reactivated'] ?? null)
            ) {
                return null;
            }
            $answer['activation'] = [
                'activation_id' => $activation['activation_id'],
                'reactivated' => $activation['reactivated'],
            ];
        }
        return $answer;
    }

    /** The licence fields of a verify answer (or activate's `license`), or null when malformed. */
    private static function licenseFrom(mixed $value): ?array
    {
        if (
            !is_array($value)
            || ($value['license_status'] ?? null) !== 'active'
            || !array_key_exists('expires_at', $value)
            || !(is_string($value['expires_at']) || $value['expires_at'] === null)
            || !is_int($value['domain_limit'] ?? null)
            || !is_bool($value['site_match'] ?? null)
            || !is_string($value['product_slug'] ?? null)
            || !is_string($value['product_name'] ?? null)
        ) {
            return null;
        }
        return [
            'license_status' => 'active',
            'expires_at' => $value['expires_at'],
            'domain_limit' => $value['domain_limit'],
            'site_match' => $value['site_match'],
            'product_slug' => $value['product_slug'],
            'product_name' => $value['product_name'],
        ];
    }

    private static function signatureFrom(mixed $value): ?array
    {
        if (!is_array($value) || ($value['alg'] ?? null) !== 'ed25519') {
            return null;
        }
        foreach (['key_id', 'issued_at', 'valid_until', 'value'] as $field) {
            if (!is_string($value[$field] ?? null)) {
                return null;
            }
        }
        return [
            'alg' => 'ed25519',
            'key_id' => $value['key_id'],
            'issued_at' => $value['issued_at'],
            'valid_until' => $value['valid_until'],
            'value' => $value['value'],
        ];
    }

    /** The first 16 hex digits of the SHA-256 of the raw public key. */
    private static function keyIdOf(string $publicKey): string
    {
        return substr(hash('sha256', (string) base64_decode($publicKey, true)), 0, 16);
    }

    private static function parseTime(string $value, string $format): ?int
    {
        $time = DateTimeImmutable::createFromFormat('!' . $format, $value, new DateTimeZone('UTC'));
        return $time === false ? null : $time->getTimestamp();
    }
}
