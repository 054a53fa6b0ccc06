package kafka

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// scramClient is the client side of SCRAM (RFC 5802, RFC 7677) as Sarama's
// SCRAMClient interface drives it: Begin, then Step until Done. It is written
// here on the standard library because Sarama ships no SCRAM implementation
// and the usual third-party one is not available to this build. Passwords
// are used as given (no SASLprep), which matches ASCII credentials exactly.
//
// One scramClient serves one authentication and is not safe for concurrent
// use; Sarama creates one per connection through the generator function.
type scramClient struct {
	newHash func() hash.Hash

	user, password, authzID string
	clientNonce             string

	step            int
	clientFirstBare string
	serverSignature []byte
	done            bool
}

func newSCRAMClient[H hash.Hash](newHash func() H) *scramClient {
	return &scramClient{newHash: func() hash.Hash { return newHash() }}
}

// Begin implements sarama.SCRAMClient.
func (c *scramClient) Begin(user, password, authzID string) error {
	nonce := make([]byte, 24)
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("scram: nonce: %w", err)
	}
	c.user, c.password, c.authzID = user, password, authzID
	c.clientNonce = base64.RawStdEncoding.EncodeToString(nonce)
	c.step, c.done, c.serverSignature = 0, false, nil
	return nil
}

// Step implements sarama.SCRAMClient.
func (c *scramClient) Step(challenge string) (string, error) {
	c.step++
	switch c.step {
	case 1:
		c.clientFirstBare = "n=" + scramEscape(c.user) + ",r=" + c.clientNonce
		return c.gs2Header() + c.clientFirstBare, nil
	case 2:
		return c.clientFinal(challenge)
	case 3:
		return "", c.verifyServerFinal(challenge)
	}
	return "", errors.New("scram: conversation already finished")
}

// Done implements sarama.SCRAMClient.
func (c *scramClient) Done() bool { return c.done }

func (c *scramClient) gs2Header() string {
	if c.authzID == "" {
		return "n,,"
	}
	return "n,a=" + scramEscape(c.authzID) + ","
}

func (c *scramClient) clientFinal(serverFirst string) (string, error) {
	attrs := scramAttrs(serverFirst)
	if e, ok := attrs["e"]; ok {
		return "", fmt.Errorf("scram: server refused: %s", e)
	}
	nonce, salt64, iter64 := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, c.clientNonce) || len(nonce) == len(c.clientNonce) {
		return "", errors.New("scram: server nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		return "", fmt.Errorf("scram: salt: %w", err)
	}
	iter, err := strconv.Atoi(iter64)
	if err != nil || iter < 1 {
		return "", fmt.Errorf("scram: bad iteration count %q", iter64)
	}

	salted, err := pbkdf2.Key(c.newHash, c.password, salt, iter, c.newHash().Size())
	if err != nil {
		return "", fmt.Errorf("scram: derive key: %w", err)
	}
	clientKey := c.hmac(salted, "Client Key")
	h := c.newHash()
	h.Write(clientKey)
	storedKey := h.Sum(nil)

	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2Header())) + ",r=" + nonce
	authMessage := c.clientFirstBare + "," + serverFirst + "," + withoutProof
	clientSignature := c.hmac(storedKey, authMessage)
	proof := make([]byte, len(clientKey))
	for i := range clientKey {
		proof[i] = clientKey[i] ^ clientSignature[i]
	}
	c.serverSignature = c.hmac(c.hmac(salted, "Server Key"), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// verifyServerFinal checks the server's signature, which proves the server
// knows the credentials too (mutual authentication).
func (c *scramClient) verifyServerFinal(serverFinal string) error {
	attrs := scramAttrs(serverFinal)
	if e, ok := attrs["e"]; ok {
		return fmt.Errorf("scram: server refused: %s", e)
	}
	got, err := base64.StdEncoding.DecodeString(attrs["v"])
	if err != nil {
		return fmt.Errorf("scram: server signature: %w", err)
	}
	if subtle.ConstantTimeCompare(got, c.serverSignature) != 1 {
		return errors.New("scram: server signature does not match")
	}
	c.done = true
	return nil
}

func (c *scramClient) hmac(key []byte, msg string) []byte {
	m := hmac.New(c.newHash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// scramAttrs splits "k=v,k=v"; values may contain '=' (base64 padding).
func scramAttrs(s string) map[string]string {
	attrs := make(map[string]string)
	for _, part := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(part, "="); ok {
			attrs[k] = v
		}
	}
	return attrs
}

// scramEscape escapes a saslname as RFC 5802 section 5.1 requires.
func scramEscape(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}
