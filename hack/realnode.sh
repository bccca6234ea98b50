#!/usr/bin/env bash
# A real single-node Kubernetes without Docker: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (kwokctl's binary runtime, no
# kwok-controller), a real kubelet on Debian's containerd and runc, bridge CNI,
# kube-proxy in nftables mode, CoreDNS and local-path storage, and an OCI
# registry the node pulls from. Every binary is built from the Go module
# proxy; images are loaded from tarballs, or pushed to the registry.
#
# It shares the host, so it uses its own names, ports, bridge and directories,
# and `down` removes every trace. Needs root on Linux.
#
# usage: hack/realnode.sh up|down [--purge]|load [image...]|kubeconfig|registry|audit-log|status
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DAYTWO_CACHE:-$HOME/.cache/daytwo}
BIN=$CACHE/k8s-${K8S_VERSION:-v1.36.3}
R=$CACHE/realnode
NAME=daytwo-rn
NODE=daytwo-node
BRIDGE=d2br0
CNI_NET=daytwo
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/16
export KWOK_WORKDIR=$R/kwok
KCFG=$R/kubeconfig
PKI=$KWOK_WORKDIR/clusters/$NAME/pki
CTR=(ctr -a "$R/run/containerd.sock" -n k8s.io)
# The dev cluster's registry: make release REGISTRY=127.0.0.1:5000 pushes
# there, and the node pulls from it.
REGISTRY=${DAYTWO_REGISTRY:-127.0.0.1:5000}
export PATH=$BIN:$PATH

T0=$(date +%s%N)
log() { printf '[realnode %6.1fs] %s\n' "$(( $(date +%s%N) - T0 ))e-9" "$*"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
k() { kubectl --kubeconfig "$KCFG" "$@"; }

need_packages() {
  local missing=()
  for p in containerd:containerd runc:runc nft:nftables iptables:iptables conntrack:conntrack socat:socat \
           debootstrap:debootstrap /bin/busybox:busybox-static /usr/lib/cni/bridge:containernetworking-plugins; do
    command -v "${p%%:*}" >/dev/null 2>&1 || [ -e "${p%%:*}" ] || missing+=("${p#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} from Debian"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<NF;i++) if($i=="src") print $(i+1)}'; }

# write_if_changed writes stdin to a file only when the content differs:
# kube-proxy exits when its config file is rewritten, even with equal content,
# so `up` on a running node must leave unchanged files alone.
write_if_changed() {
  local tmp; tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

write_configs() {
  mkdir -p "$R"/{run,logs,pv,containerd,cni/net.d,cni/ipam,kubelet/root,kubelet/pki,kubelet/pod-logs,kube-proxy}
  write_if_changed "$R/containerd/config.toml" <<TOML
version = 2
root = "$R/containerd/root"
state = "$R/containerd/state"
[grpc]
  address = "$R/run/containerd.sock"
[ttrpc]
  address = "$R/run/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.1"
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe" (runc cannot lower oom_score_adj).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$R/cni/net.d"
  # The dev cluster's registry (start_registry), over plain HTTP.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$R/containerd/certs.d"
TOML
  mkdir -p "$R/containerd/certs.d/$REGISTRY"
  write_if_changed "$R/containerd/certs.d/$REGISTRY/hosts.toml" <<TOML
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
TOML
  mkdir -p "$R/registry"
  write_if_changed "$R/registry/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $R/registry/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
YAML
  write_if_changed "$R/cni/net.d/10-daytwo.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "$CNI_NET", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$R/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
JSON
  write_if_changed "$R/kwokctl.yaml" <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  # In-cluster clients reach the apiserver at the first service IP.
  kubeApiserverCertSANs: ["10.96.0.1", "$NODE"]
YAML
  write_if_changed "$R/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$R/run/containerd.sock
imageServiceEndpoint: unix://$R/run/containerd.sock
address: 0.0.0.0
port: 10350
readOnlyPort: 0
healthzPort: 10348
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: ["10.96.0.10"]
resolvConf: /etc/resolv.conf
failSwapOn: false
protectKernelDefaults: false
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
podLogsDir: $R/kubelet/pod-logs
YAML
  write_if_changed "$R/kube-proxy/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KCFG}
mode: nftables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10356
metricsBindAddress: 127.0.0.1:10349
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

# start_registry runs the dev cluster's OCI registry (distribution, built
# from its Go module) on $REGISTRY: releases are pushed to it (make release
# REGISTRY=...), and the node's containerd pulls from it.
start_registry() {
  if alive "$R/run/registry.pid"; then return; fi
  "$root/hack/build-addons.sh" registry | { grep -v cached || true; }
  # No tracing: it would export to localhost:4318 and log each failure.
  OTEL_TRACES_EXPORTER=none setsid "$CACHE/addons/registry" serve "$R/registry/config.yml" >"$R/logs/registry.log" 2>&1 < /dev/null &
  echo $! >"$R/run/registry.pid"
  for _ in $(seq 50); do curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 && break; sleep 0.2; done
  # Ours answers, not another process on the port.
  alive "$R/run/registry.pid" && curl -fsS "http://$REGISTRY/v2/" >/dev/null || { tail "$R/logs/registry.log"; exit 1; }
  log "registry running on $REGISTRY"
}

start_containerd() {
  if alive "$R/run/containerd.pid"; then return; fi
  setsid containerd --config "$R/containerd/config.toml" >"$R/logs/containerd.log" 2>&1 < /dev/null &
  echo $! >"$R/run/containerd.pid"
  for _ in $(seq 100); do "${CTR[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
  "${CTR[@]}" version >/dev/null || { tail "$R/logs/containerd.log"; exit 1; }
  log "containerd running"
}

# load [image...]: imports image tarballs from hack/images.sh into the node.
# Infrastructure images load when missing or rebuilt since they were loaded
# (the tarball's size and time are recorded); daytwo's own always reload.
all_present() {
  local t
  for t in ${1//,/ }; do grep -qx "$t" <<<"$2" || return 1; done
}

load() {
  local index=$CACHE/images/index have
  [ -f "$index" ] || { echo "no images built: run make images" >&2; exit 1; }
  have=$("${CTR[@]}" images ls -q)
  while read -r file tag; do
    local name=${file%.tar}
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
    local built seen="$R/loaded/$name"
    built=$(stat -c '%s %Y' "$CACHE/images/$file")
    # Rebuilt on every run, so always imported; the others only when a tag is missing or the tarball changed.
    case $name in
      daytwo|demo-web|demo-web-crash|e2e-client) ;;
      *) all_present "$tag" "$have" && [ "$(cat "$seen" 2>/dev/null)" = "$built" ] && continue ;;
    esac
    "${CTR[@]}" images import "$CACHE/images/$file" >/dev/null
    mkdir -p "$R/loaded" && echo "$built" >"$seen"
    log "loaded ${tag//,/ }"
  done <"$index"
}

# wait_for SECONDS WHAT CMD...: runs CMD until it succeeds, or fails the
# bring-up after SECONDS naming WHAT, so a stuck step never hangs CI.
wait_for() {
  local limit=$1 what=$2 deadline=$((SECONDS + $1)); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "realnode: $what not reached after ${limit}s" >&2
      return 1
    fi
    sleep 0.3
  done
}

start_control_plane() {
  if kwokctl get clusters 2>/dev/null | grep -qx "$NAME" && ! k get --raw /readyz >/dev/null 2>&1; then
    # Its processes died with an earlier session (the node's pods with them):
    # `kwokctl start` may then never serve (a CI run waited 70 minutes), so
    # the control plane is recreated. Images and volumes stay.
    log "control plane exists but does not answer; recreating it"
    kwokctl delete cluster --name "$NAME" >>"$R/logs/kwokctl.log" 2>&1 || true
  fi
  if ! kwokctl get clusters 2>/dev/null | grep -qx "$NAME"; then
    kwokctl -c "$R/kwokctl.yaml" create cluster --name "$NAME" --runtime binary \
      --etcd-binary "$BIN/etcd" --kube-apiserver-binary "$BIN/kube-apiserver" \
      --kube-controller-manager-binary "$BIN/kube-controller-manager" --kube-scheduler-binary "$BIN/kube-scheduler" \
      --kwok-controller-binary "$BIN/kwok" --disable kwok-controller --kubeconfig "$R/kubeconfig-kwok" \
      --kube-audit-policy "$root/hack/realnode/audit-policy.yaml" \
      --extra-args "kube-apiserver=service-cluster-ip-range=$SVC_CIDR" \
      --extra-args kube-apiserver=kubelet-preferred-address-types=InternalIP \
      --extra-args kube-apiserver=service-node-port-range=30000-31999 \
      --extra-args "kube-apiserver=kubelet-client-certificate=$PKI/admin.crt" \
      --extra-args "kube-apiserver=kubelet-client-key=$PKI/admin.key" \
      --extra-args "kube-controller-manager=cluster-cidr=$POD_CIDR" \
      --wait 2m >>"$R/logs/kwokctl.log" 2>&1 || { tail -20 "$R/logs/kwokctl.log"; exit 1; }
  fi
  kwokctl get kubeconfig --name "$NAME" >"$KCFG" 2>>"$R/logs/kwokctl.log"
  wait_for 120 "control plane /readyz" k get --raw /readyz || { tail -20 "$R/logs/kwokctl.log" >&2; exit 1; }
  log "control plane ready"
}

# supervise_control_plane restarts kube-controller-manager and kube-scheduler
# when they exit, as a kubelet restarts static pods or systemd a unit:
# kwokctl's binary runtime starts them once, and both exit when they lose
# their leader election (an API server paused for 60 s was enough), after
# which the node created no pod. It records each one's command line and
# working directory as kwokctl started them, and runs the same again.
supervise_control_plane() {
  alive "$R/run/supervisor.pid" && return
  local comp pid
  for comp in kube-controller-manager kube-scheduler; do
    pid=$(pgrep -o -f -- "/$NAME/bin/$comp " || true)
    [ -n "$pid" ] || { echo "realnode: no $comp process to supervise" >&2; exit 1; }
    tr '\0' '\n' <"/proc/$pid/cmdline" >"$R/run/$comp.cmd"
    readlink "/proc/$pid/cwd" >"$R/run/$comp.cwd"
  done
  setsid bash -c '
    R=$1 NAME=$2
    while sleep 1; do
      for comp in kube-controller-manager kube-scheduler; do
        pgrep -f -- "/$NAME/bin/$comp " >/dev/null && continue
        mapfile -t args <"$R/run/$comp.cmd"
        echo "$(date -u +%FT%TZ) $comp exited; starting it again" >>"$R/logs/supervisor.log"
        (cd "$(cat "$R/run/$comp.cwd")" && setsid "${args[@]}" >>"$R/logs/$comp.log" 2>&1 </dev/null &)
      done
    done' supervisor "$R" "$NAME" >/dev/null 2>&1 </dev/null &
  echo $! >"$R/run/supervisor.pid"
}

start_node() {
  if ! alive "$R/run/kubelet.pid"; then
    setsid kubelet --config="$R/kubelet/config.yaml" --kubeconfig="$KCFG" --root-dir="$R/kubelet/root" \
      --cert-dir="$R/kubelet/pki" --hostname-override="$NODE" --node-ip="$(node_ip)" --v=1 \
      >"$R/logs/kubelet.log" 2>&1 < /dev/null &
    echo $! >"$R/run/kubelet.pid"
  fi
  if ! alive "$R/run/kube-proxy.pid"; then
    setsid kube-proxy --config "$R/kube-proxy/config.yaml" >"$R/logs/kube-proxy.log" 2>&1 < /dev/null &
    echo $! >"$R/run/kube-proxy.pid"
  fi
  wait_for 120 "node $NODE registered" k get node "$NODE" || { tail -20 "$R/logs/kubelet.log" >&2; exit 1; }
  k wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null || { tail -20 "$R/logs/kubelet.log" >&2; exit 1; }
  log "node $NODE Ready"
}

start_addons() {
  wait_for 120 "default service account" k get sa default || exit 1
  k apply --server-side -f "$root/hack/realnode/coredns.yaml" >/dev/null
  sed "s#@PV_DIR@#$R/pv#" "$root/hack/realnode/local-path.yaml" | k apply --server-side -f - >/dev/null
  k -n kube-system rollout status deploy/coredns --timeout=120s >/dev/null
  k -n local-path-storage rollout status deploy/local-path-provisioner --timeout=120s >/dev/null
  # The service network works end to end once kube-proxy routes the kube-dns
  # ClusterIP to a ready CoreDNS; pods resolve names only after that.
  for _ in $(seq 120); do timeout 1 bash -c '</dev/tcp/10.96.0.10/53' 2>/dev/null && break; sleep 0.5; done
  timeout 1 bash -c '</dev/tcp/10.96.0.10/53' 2>/dev/null || { echo "kube-dns ClusterIP does not answer" >&2; exit 1; }
  log "CoreDNS and local-path storage ready"
}

up() {
  [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] || { echo "the real node needs root on Linux" >&2; exit 1; }
  need_packages
  "$root/hack/build-k8s.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl kubectl kubelet kube-proxy | grep -v '^/' | grep -v cached || true
  "$root/hack/images.sh" pause busybox coredns local-path-provisioner | grep -v cached || true
  write_configs
  # Remember the host's ip_forward (the bridge plugin turns it on) to restore it on down.
  [ -f "$R/ip_forward.orig" ] || sysctl -n net.ipv4.ip_forward >"$R/ip_forward.orig"
  start_containerd
  start_registry
  load pause busybox coredns local-path-provisioner
  start_control_plane
  supervise_control_plane
  start_node
  start_addons
  for p in containerd registry kubelet kube-proxy; do
    alive "$R/run/$p.pid" || { echo "$p is not running; see $R/logs/$p.log" >&2; exit 1; }
  done
  log "up; KUBECONFIG=$KCFG"
}

stop_pid() {
  local f=$1 p
  alive "$f" || { rm -f "$f"; return; }
  p=$(cat "$f"); kill "$p" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$p" 2>/dev/null || true
  rm -f "$f"
}

down() {
  # 1. Let the kubelet tear pods down through CRI, so CNI DEL releases veths, IPs and masquerade rules.
  if alive "$R/run/kubelet.pid" && k get --raw /readyz >/dev/null 2>&1; then
    for ns in $(k get ns -o jsonpath='{.items[*].metadata.name}'); do
      k -n "$ns" delete deploy,sts,ds,rs,job,pod --all --grace-period=1 --wait=false >/dev/null 2>&1 || true
    done
    for _ in $(seq 120); do
      [ -z "$("${CTR[@]}" task ls -q 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  # 2. Node components, then containerd (killing what is left).
  stop_pid "$R/run/kube-proxy.pid"
  nft delete table ip kube-proxy 2>/dev/null || true
  nft delete table ip6 kube-proxy 2>/dev/null || true
  stop_pid "$R/run/kubelet.pid"
  if alive "$R/run/containerd.pid"; then
    for t in $("${CTR[@]}" task ls -q 2>/dev/null); do
      "${CTR[@]}" task kill -s SIGKILL "$t" 2>/dev/null || true; sleep 0.2
      "${CTR[@]}" task delete -f "$t" >/dev/null 2>&1 || true
    done
    for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1 || true; done
  fi
  stop_pid "$R/run/containerd.pid"
  stop_pid "$R/run/registry.pid"
  # 3. Control plane, its supervisor first.
  stop_pid "$R/run/supervisor.pid"
  kwokctl delete cluster --name "$NAME" >>"$R/logs/kwokctl.log" 2>&1 || true
  # 4. Host leftovers: mounts, network namespaces, the bridge, CNI and kubelet chains.
  awk '{print $2}' /proc/mounts | grep -E "^($R/|/run/containerd/|/var/run/netns/cni-|/run/netns/cni-)" | sort -r \
    | while read -r m; do umount -l "$m" 2>/dev/null || true; done || true
  for n in $(ls /var/run/netns 2>/dev/null | grep '^cni-'); do ip netns delete "$n" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
  for ipt in iptables ip6tables; do
    command -v $ipt >/dev/null || continue
    $ipt -t nat -S POSTROUTING 2>/dev/null | grep "name: \\\\\"$CNI_NET\\\\\"" | sed 's/^-A/-D/' \
      | while read -r rule; do eval "$ipt -t nat $rule" || true; done || true
    for c in $($ipt -t nat -S 2>/dev/null | awk '/^-N CNI-/{print $2}'); do $ipt -t nat -F "$c"; $ipt -t nat -X "$c"; done
    $ipt -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null || true
    $ipt -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
    for tc in filter:KUBE-FIREWALL filter:KUBE-KUBELET-CANARY nat:KUBE-KUBELET-CANARY mangle:KUBE-KUBELET-CANARY mangle:KUBE-IPTABLES-HINT; do
      $ipt -t "${tc%%:*}" -F "${tc#*:}" 2>/dev/null || true
      $ipt -t "${tc%%:*}" -X "${tc#*:}" 2>/dev/null || true
    done
  done
  rm -rf /var/lib/cni/results/"$CNI_NET"-* /var/lib/cni/results/cni-loopback-* "$R/cni/ipam" "$R/kubelet/root" \
    "$R/kubelet/pod-logs" "$R/kubelet/pki" "$R/containerd/state" /var/log/containers /var/log/pods /var/lib/kubelet /run/containerd
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  if [ -f "$R/ip_forward.orig" ]; then
    sysctl -qw "net.ipv4.ip_forward=$(cat "$R/ip_forward.orig")" || true
    rm -f "$R/ip_forward.orig"
  fi
  # iptables-nft base tables the kubelet and CNI created: dropped when they hold no rules.
  for t in "ip mangle" "ip filter" "ip nat" "ip6 mangle" "ip6 filter" "ip6 nat"; do
    nft list table $t >/dev/null 2>&1 || continue
    nft list table $t | grep -qE '^\s+(ip|tcp|udp|meta|counter|jump|goto|accept|drop|ct|oifname|iifname|masquerade|dnat|snat|xt|mark)' \
      || nft delete table $t 2>/dev/null || true
  done
  if [ "${1:-}" = --purge ]; then
    # Images, volumes and cluster state go too.
    rm -rf "$R/containerd/root" "$R/loaded" "$R/pv" "$R/registry/data" "$KWOK_WORKDIR"
  fi
  log "down"
}

status() {
  for p in containerd registry kubelet kube-proxy; do
    if alive "$R/run/$p.pid"; then echo "$p: running"; else echo "$p: stopped"; fi
  done
  k get nodes 2>/dev/null || echo "control plane: not answering"
}

case "${1:-}" in
  up) up ;;
  down) shift; down "$@" ;;
  load) shift; load "$@" ;;
  kubeconfig) echo "$KCFG" ;;
  registry) echo "$REGISTRY" ;;
  # The API server's audit log: the operator's requests (hack/realnode/audit-policy.yaml).
  audit-log) echo "$KWOK_WORKDIR/clusters/$NAME/logs/audit.log" ;;
  status) status ;;
  # tag SRC DST: another name for a loaded image (the e2e's stand-in for a new release).
  tag) "${CTR[@]}" images tag --force "$2" "$3" >/dev/null ;;
  *) echo "usage: $0 up|down [--purge]|load [image...]|kubeconfig|registry|audit-log|status|tag SRC DST" >&2; exit 2 ;;
esac
