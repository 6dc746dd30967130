package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestClusterCLITLS: the head prints its CA hash; a worker pinned to it
// joins; one pinned to another hash refuses to start, naming both hashes;
// status prints the hash; a plaintext (--insecure) client is told the
// cluster uses TLS; troupe tls makes operator certificates that a second
// cluster of operator-certified nodes runs with.
func TestClusterCLITLS(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process CLI test: skipped in -short")
	}
	dir := t.TempDir()
	headAddr, _ := freeAddr(t, "127.0.0.53")
	head := startCLI(t, nil, "start", "--head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr, "--fast-timers",
		"--resources", "cpu=2", "--node-id", "head", "--http", "off")
	hashRE := regexp.MustCompile(`cluster CA hash: (sha256:[0-9a-f]{64})`)
	var hash string
	deadline := time.Now().Add(30 * time.Second)
	for hash == "" {
		if m := hashRE.FindStringSubmatch(head.output()); m != nil {
			hash = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("head printed no CA hash:\n%s", head.output())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "head", "tls", "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key: %v %v, want mode 0600", err, fi)
	}
	tok, _ := os.ReadFile(filepath.Join(dir, "head", "token"))
	env := []string{"TROUPE_TOKEN=" + strings.TrimSpace(string(tok)), "TROUPE_ADDRESS=" + headAddr}

	// A pin of another CA: refused, with both hashes named.
	other := "sha256:" + strings.Repeat("ab", 32)
	badAddr, _ := freeAddr(t, "127.0.0.54")
	out, err := cliRun(t, env, "start", "--join", headAddr, "--bind", badAddr, "--fast-timers", "--node-id", "bad", "--ca-hash", other)
	if err == nil || !strings.Contains(out, "does not match the pinned --ca-hash") || !strings.Contains(out, hash) {
		t.Errorf("join with a wrong --ca-hash: %v\n%s", err, out)
	}
	// The right pin joins.
	workerAddr, _ := freeAddr(t, "127.0.0.55")
	worker := startCLI(t, append(env, "TROUPE_CA_HASH="+hash), "start", "--join", headAddr, "--bind", workerAddr, "--fast-timers",
		"--node-id", "worker", "--resources", "cpu=1", "--data-dir", filepath.Join(dir, "worker"))
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, err := statusJSON(t, env, "--ca-hash", hash)
		if err == nil && nodeStateOf(st, "worker") == "alive" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pinned worker never alive: %v\n%s", err, worker.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "worker", "tls", "node.pem")); err != nil {
		t.Errorf("worker did not keep its certificate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "worker", "tls", "ca-key.pem")); err == nil {
		t.Error("a worker node was given the CA key")
	}
	out, err = cliRun(t, env, "status")
	if err != nil || !strings.Contains(out, "TLS: cluster CA "+hash) {
		t.Errorf("status does not show the CA hash: %v\n%s", err, out)
	}
	out, err = cliRun(t, env, "status", "--insecure")
	if err == nil || !strings.Contains(out, "drop --insecure") || !strings.Contains(out, headAddr) {
		t.Errorf("plaintext status against a TLS cluster: %v\n%s", err, out)
	}
	if out, err := cliRun(t, env, "status", "--ca-hash", other); err == nil || !strings.Contains(out, "does not match") {
		t.Errorf("status pinned to another CA: %v\n%s", err, out)
	}

	// Operator certificates: a cluster of its own.
	certs := filepath.Join(dir, "certs")
	os.MkdirAll(certs, 0o700)
	if out, err := cliRun(t, nil, "tls", "ca", "create", "--dir", certs); err != nil {
		t.Fatalf("tls ca create: %v\n%s", err, out)
	}
	if out, err := cliRun(t, nil, "tls", "ca", "create", "--dir", certs); err == nil || !strings.Contains(out, "refusing to overwrite") {
		t.Errorf("second tls ca create: %v\n%s", err, out)
	}
	ca, cakey := filepath.Join(certs, "troupe-ca.pem"), filepath.Join(certs, "troupe-ca-key.pem")
	for _, n := range []string{"h2", "w2"} {
		if out, err := cliRun(t, nil, "tls", "cert", "create", "--name", n, "--ca", ca, "--ca-key", cakey, "--dir", certs, "--days", "2"); err != nil {
			t.Fatalf("tls cert create: %v\n%s", err, out)
		}
	}
	h2Addr, _ := freeAddr(t, "127.0.0.56")
	opEnv := []string{"TROUPE_TOKEN=op-token", "TROUPE_ADDRESS=" + h2Addr, "TROUPE_TLS_CA=" + ca}
	h2 := startCLI(t, opEnv, "start", "--head", "--data-dir", filepath.Join(dir, "h2"), "--bind", h2Addr, "--fast-timers", "--node-id", "h2",
		"--resources", "cpu=1", "--http", "off",
		"--tls-ca", ca, "--tls-cert", filepath.Join(certs, "troupe-h2.pem"), "--tls-key", filepath.Join(certs, "troupe-h2-key.pem"))
	w2Addr, _ := freeAddr(t, "127.0.0.57")
	startCLI(t, opEnv, "start", "--join", h2Addr, "--bind", w2Addr, "--fast-timers", "--node-id", "w2", "--resources", "cpu=1",
		"--tls-ca", ca, "--tls-cert", filepath.Join(certs, "troupe-w2.pem"), "--tls-key", filepath.Join(certs, "troupe-w2-key.pem"))
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, err := statusJSON(t, opEnv)
		if err == nil && nodeStateOf(st, "w2") == "alive" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator-certified cluster never formed: %v\n%s", err, h2.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The first cluster's CA does not open the second.
	if out, err := cliRun(t, []string{"TROUPE_TOKEN=op-token"}, "status", "--address", h2Addr, "--tls-ca", filepath.Join(dir, "head", "tls", "ca.pem")); err == nil || !strings.Contains(out, "not from this cluster's CA") {
		t.Errorf("status with another cluster's CA: %v\n%s", err, out)
	}

	// --insecure: plaintext on purpose; a TLS client is told so.
	h3Addr, _ := freeAddr(t, "127.0.0.58")
	h3 := startCLI(t, []string{"TROUPE_TOKEN=plain-token"}, "start", "--head", "--insecure", "--data-dir", filepath.Join(dir, "h3"), "--bind", h3Addr,
		"--fast-timers", "--node-id", "h3", "--resources", "cpu=1", "--http", "off")
	plainEnv := []string{"TROUPE_TOKEN=plain-token", "TROUPE_ADDRESS=" + h3Addr}
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, err := cliRun(t, plainEnv, "status", "--insecure")
		if err == nil && strings.Contains(out, "TLS: off") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --insecure of an --insecure head: %v\n%s\n%s", err, out, h3.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The line may reach the output pipe after the node already answers.
	for !strings.Contains(h3.output(), "TLS off (--insecure)") {
		if time.Now().After(deadline) {
			t.Fatalf("an --insecure head does not say TLS is off:\n%s", h3.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := cliRun(t, plainEnv, "status"); err == nil || !strings.Contains(out, "does not speak TLS") || !strings.Contains(out, h3Addr) {
		t.Errorf("TLS status against an --insecure head: %v\n%s", err, out)
	}
}
