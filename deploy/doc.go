// Package deploy holds what launches troupe clusters the way users do and
// the tests that check it: the FROM-scratch container image
// (build-image.sh, Dockerfile), a five-node docker-compose cluster
// (compose.yaml), Kubernetes manifests (k8s/), a Prometheus scrape
// configuration (prometheus/) and a Grafana dashboard of troupe's metrics
// (grafana/). The package has no code of its own: manifests_test.go checks
// the Kubernetes manifests against the CLI's defaults, docker_test.go
// (build tag docker) runs the compose cluster through leader and worker
// faults on a real Docker engine, and prometheus_test.go (build tag
// prometheus) has a real Prometheus scrape a cluster running
// deploy/metricsjob and runs every dashboard query against it.
package deploy
