#!/usr/bin/env bash
# The VM's free page reporting (virtio-balloon): status, off, on.
#
# With reporting on, the guest hands free memory back to the host, and the next page that grows
# into it (a page-cache page of a growing file above all) is faulted in again by the host at
# several times the cost of reusing a page. An engine whose files grow for the whole run (levee's
# journal between compactions) pays it on every write; one whose files churn reuses freed pages
# first. docs/benchmarks.md, "Free page reporting", measures both ways.
#
#   e2e/scenarios/page-reporting.sh status   order and KiB reported so far
#   e2e/scenarios/page-reporting.sh off      stop reporting (order above the largest block) and
#                                            touch GIB of memory once (default 12) so the host
#                                            backs it again; needs root
#   e2e/scenarios/page-reporting.sh on       report again (order 9, the kernel's default here)
#
# Every levee-bench run records the order and the KiB reported during it in meta.txt.
set -euo pipefail

P=/sys/module/page_reporting/parameters
ON_ORDER=9
OFF_ORDER=11

die() { echo "page-reporting: $*" >&2; exit 1; }

[ -d "$P" ] || die "this kernel has no free page reporting ($P missing): nothing to change"

status() {
  local order; order=$(cat "$P/page_reporting_order")
  local state=on; [ "$order" -gt 10 ] && state=off
  echo "free page reporting: $state (page_reporting_order=$order), $(cat "$P/reported_kib") KiB reported since boot"
}

case "${1:-status}" in
  status) status ;;
  off)
    [ "$(id -u)" = 0 ] || die "off needs root (it writes $P/page_reporting_order)"
    gib=${GIB:-12}
    if ! [[ "$gib" =~ ^[0-9]+$ ]] || [ "$gib" -lt 1 ]; then
      die "GIB must be a whole number of GiB, not '$gib'"
    fi
    echo $OFF_ORDER > "$P/page_reporting_order"
    # Touch the memory once through tmpfs (no disk I/O), then free it: the pages stay backed.
    f=$(mktemp /dev/shm/page-reporting.XXXXXX)
    trap 'rm -f "$f"' EXIT
    echo "touching $gib GiB so the host backs it again ..." >&2
    head -c "${gib}G" /dev/zero > "$f"
    rm -f "$f"
    status
    ;;
  on)
    [ "$(id -u)" = 0 ] || die "on needs root (it writes $P/page_reporting_order)"
    echo $ON_ORDER > "$P/page_reporting_order"
    status
    ;;
  *) die "usage: $0 status|off|on" ;;
esac
