#!/usr/bin/env bash
# scripts/sdk-install.sh — install each SDK from this clone exactly as its
# README says, into an empty project outside the clone, and use it: import
# it, make a client, and verify a delivery it signed. CI runs it after the
# SDKs' tests (.ci/run).
#
# The SDKs are copied first without what a fresh clone lacks (node_modules,
# dist, build), so the installs start from what a newcomer has.
#   node:   npm install <clone>/sdks/node (its prepare script builds dist/;
#           the first time it fetches TypeScript from the npm registry)
#   python: pip install --no-build-isolation --no-index <clone>/sdks/python
#           in a venv that sees Debian's setuptools and wheel (the README's
#           offline way: no package index is needed), and PYTHONPATH
#   php:    require '<clone>/sdks/php/autoload.php' (when php is installed),
#           and a Composer path repository (when composer is too)
# Needs node and npm, and /usr/bin/python3 with venv, setuptools and wheel
# (Debian: python3-venv python3-setuptools python3-wheel).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 npm_config_audit=false npm_config_fund=false

mkdir -p "$tmp/clone"
tar -C sdks --exclude=node_modules --exclude=dist --exclude=build --exclude=__pycache__ \
	-cf - node python php | tar -C "$tmp/clone" -xf -

# A signed delivery each SDK must verify: secret, id, timestamp, body.
export SDK_CHECK_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw SDK_CHECK_ID=msg_install
SDK_CHECK_TS=$(date +%s)
export SDK_CHECK_TS

echo "== node: npm install <clone>/sdks/node"
mkdir "$tmp/node-app"
(
	cd "$tmp/node-app"
	npm init -y >/dev/null
	npm install "$tmp/clone/node"
	node --input-type=module -e '
		import { WebhookdClient, sign, verify } from "@webhookd/sdk";
		const { SDK_CHECK_SECRET: secret, SDK_CHECK_ID: id, SDK_CHECK_TS: ts } = process.env;
		new WebhookdClient("http://127.0.0.1:8080", "whk_none");
		const body = JSON.stringify({ type: "sdk.installed", data: {} });
		const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sign(secret, id, Number(ts), body) };
		const ev = verify(body, headers, secret);
		if (ev.type !== "sdk.installed") throw new Error("verify returned " + JSON.stringify(ev));
		console.log("node: @webhookd/sdk installed, imported, verified a delivery");
	'
)

python_check='
import os, json, webhookd
secret, msg_id, ts = os.environ["SDK_CHECK_SECRET"], os.environ["SDK_CHECK_ID"], int(os.environ["SDK_CHECK_TS"])
webhookd.Client("http://127.0.0.1:8080", "whk_none")
body = json.dumps({"type": "sdk.installed", "data": {}})
headers = {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": webhookd.sign(secret, msg_id, ts, body)}
assert webhookd.verify(body, headers, secret)["type"] == "sdk.installed"
print("python: webhookd imported from", os.path.dirname(webhookd.__file__), "and verified a delivery")
'
echo "== python: pip install --no-build-isolation --no-index <clone>/sdks/python (in a venv)"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-build-isolation --no-index "$tmp/clone/python"
(cd "$tmp" && "$tmp/venv/bin/python" -c "$python_check")
echo "== python: PYTHONPATH=<clone>/sdks/python"
(cd "$tmp" && PYTHONPATH="$tmp/clone/python" python3 -c "$python_check")

if command -v php >/dev/null 2>&1; then
	echo "== php: require '<clone>/sdks/php/autoload.php'"
	(cd "$tmp" && SDK_PHP="$tmp/clone/php" php -r '
		require getenv("SDK_PHP") . "/autoload.php";
		[$secret, $id, $ts] = [getenv("SDK_CHECK_SECRET"), getenv("SDK_CHECK_ID"), (int) getenv("SDK_CHECK_TS")];
		new Webhookd\Client("http://127.0.0.1:8080", "whk_none");
		$body = json_encode(["type" => "sdk.installed", "data" => new stdClass()]);
		$headers = ["webhook-id" => $id, "webhook-timestamp" => (string) $ts,
			"webhook-signature" => Webhookd\Webhook::sign($secret, $id, $ts, $body)];
		$ev = Webhookd\Webhook::verify($body, $headers, $secret);
		if (($ev["type"] ?? null) !== "sdk.installed") { fwrite(STDERR, "verify returned " . json_encode($ev) . "\n"); exit(1); }
		echo "php: autoload.php loaded Webhookd\\Client and verified a delivery\n";
	')
	if command -v composer >/dev/null 2>&1; then
		echo "== php: Composer, a path repository to <clone>/sdks/php (Packagist turned off: offline)"
		mkdir "$tmp/php-app"
		(
			cd "$tmp/php-app"
			export COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_HOME="$tmp/composer-home"
			echo '{}' >composer.json
			composer config repositories.packagist false
			composer config repositories.webhookd path "$tmp/clone/php"
			composer require -n -q webhookd/webhookd:@dev
			php -r 'require "vendor/autoload.php"; new Webhookd\Client("http://127.0.0.1:8080", "whk_none");
				echo "php: vendor/autoload.php loaded Webhookd\\Client\n";'
		)
	fi
else
	echo "sdk-install: php is not installed; the PHP SDK's install was not checked" >&2
fi
