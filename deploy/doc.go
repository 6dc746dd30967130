// Package deploy holds what launches troupe clusters the way users do and
// the tests that check it: the FROM-scratch container image
// (build-image.sh, Dockerfile), a five-node docker-compose cluster
// (compose.yaml) and Kubernetes manifests (k8s/). The package has no code
// of its own: manifests_test.go checks the Kubernetes manifests against the
// CLI's defaults, and docker_test.go (build tag docker) runs the compose
// cluster through leader and worker faults on a real Docker engine.
package deploy
