package security

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tokenFile is the token's file in a node's data dir.
const tokenFile = "token"

// TokenFile returns where a node keeps the cluster token in its data dir.
func TokenFile(dataDir string) string { return filepath.Join(dataDir, tokenFile) }

// Token returns the cluster token: flagVal, else TROUPE_TOKEN, else the
// token file in dataDir. It fails with ErrNoToken when none says.
func Token(flagVal, dataDir string) (string, error) {
	if flagVal != "" {
		return flagVal, nil
	}
	if v := os.Getenv(EnvToken); v != "" {
		return v, nil
	}
	if dataDir != "" {
		b, err := os.ReadFile(TokenFile(dataDir))
		if err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b)), nil
		}
	}
	return "", ErrNoToken
}

// NewToken returns a fresh random cluster token.
func NewToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// SaveToken writes tok to dataDir's token file (mode 0600), making the
// directory (0700) if needed, so that a restarted node, and commands given
// --data-dir, find it without a flag.
func SaveToken(dataDir, tok string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.WriteFile(TokenFile(dataDir), []byte(tok+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}
