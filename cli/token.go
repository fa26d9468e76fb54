package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// TokenEnv is the environment variable the status command reads the admin
// token from; it is the proxy's own setting (NORA_SIDECAR_ADMIN_TOKEN), so
// the Helm chart's Secret reaches the proxy and `kubectl exec … status` alike.
const TokenEnv = "NORA_SIDECAR_ADMIN_TOKEN"

// AdminToken picks the admin token for a status call: the --token flag,
// else $NORA_SIDECAR_ADMIN_TOKEN, else the first line of --token-file.
// No token at all is not an error: an admin listener without admin_token
// needs none.
func AdminToken(flagToken, tokenFile string, lookupEnv func(string) (string, bool)) (string, error) {
	if flagToken != "" {
		return flagToken, nil
	}
	if v, ok := lookupEnv(TokenEnv); ok && v != "" {
		return v, nil
	}
	if tokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token, _, _ := strings.Cut(string(b), "\n")
	if token = strings.TrimSpace(token); token == "" {
		return "", errors.New("--token-file " + tokenFile + ": empty")
	}
	return token, nil
}
