#!/usr/bin/env bash
# Build the cert-manager add-on of the e2e cluster without a container engine or registry:
# controller, webhook and cainjector of cert-manager v1.11.5 (wrapper module ./module) into one OCI
# archive each, imported into the node's containerd (skipped when no cluster runs, or with
# ADDON_IMPORT=0). Binaries and archives are cached in $LEVEE_CACHE/e2e/addons/cert-manager-v1.11.5/,
# so a second run only re-imports. Writes images.env there for install.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=cert-manager TIMEOUT=0
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
CM_VERSION=v1.11.5
cache=$LEVEE_CACHE/e2e/addons/cert-manager-$CM_VERSION
mkdir -p "$cache"
t0=$SECONDS

cmds=(controller webhook cainjector)
{
  for cmd in "${cmds[@]}"; do
    go_build "$cache" "$cmd" "$here/module" "github.com/cert-manager/cert-manager/cmd/$cmd" \
      "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$CM_VERSION"
    ref=docker.io/library/levee-e2e-cert-manager-$cmd:$CM_VERSION
    oci_image "$cache" "$cmd" "$ref" "/bin/$cmd" "$cache/$cmd=/bin/$cmd"
    printf 'CM_%s_IMAGE=%s\n' "$(printf '%s' "$cmd" | tr '[:lower:]' '[:upper:]')" "$ref" >&3
  done
  printf 'CM_VERSION=%s\n' "$CM_VERSION" >&3
} 3>"$cache/images.env.tmp.$$"
mv -f "$cache/images.env.tmp.$$" "$cache/images.env"
import_images "$cache" "${cmds[@]}"
say "done in $((SECONDS - t0)) s"
