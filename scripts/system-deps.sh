#!/usr/bin/env bash
# Install the real servers the test suite runs (Debian packages). Needs root; skips what is present.
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v tmux >/dev/null || need+=(tmux)  # recompprof watch is tested in a real terminal
# Spark (pyspark, the history lake's distributed-engine test) needs Java 17 or newer
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing system packages: ${need[*]} (run as root: apt-get install ${need[*]})" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
