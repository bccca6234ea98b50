// Package testenv starts envtest (a real kube-apiserver and etcd, built by
// hack/build-k8s.sh) with daytwo's CRDs installed, for integration tests.
package testenv
