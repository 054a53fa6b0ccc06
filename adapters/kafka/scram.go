package kafka

import (
	"crypto/sha256"
	"crypto/sha512"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramClient is the client side of SCRAM (RFC 5802, RFC 7677) as Sarama's
// SCRAMClient interface drives it: Begin, then Step until Done. The
// conversation is github.com/xdg-go/scram's, which prepares user name and
// password with SASLprep (RFC 4013) as the RFC requires, and checks the
// server's signature (mutual authentication) before Done reports true.
//
// One scramClient serves one authentication and is not safe for concurrent
// use; Sarama creates one per connection through the generator function
// (see scramGenerator).
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

var _ sarama.SCRAMClient = (*scramClient)(nil)

// scramGenerator returns the Sarama generator function for mechanism,
// SASLSCRAMSHA256 or SASLSCRAMSHA512; nil for any other.
func scramGenerator(mechanism string) func() sarama.SCRAMClient {
	var h scram.HashGeneratorFcn
	switch mechanism {
	case SASLSCRAMSHA256:
		h = sha256.New
	case SASLSCRAMSHA512:
		h = sha512.New
	default:
		return nil
	}
	return func() sarama.SCRAMClient { return &scramClient{hash: h} }
}

// Begin implements sarama.SCRAMClient. It fails when user, password or
// authzID is refused by SASLprep (a prohibited or unassigned code point).
func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = cl.NewConversation()
	return nil
}

// Step implements sarama.SCRAMClient: the answer to the server's challenge,
// or an error when the server refuses or cannot be verified.
func (c *scramClient) Step(challenge string) (string, error) {
	return c.conv.Step(challenge)
}

// Done implements sarama.SCRAMClient: true once the server's final message
// was verified.
func (c *scramClient) Done() bool { return c.conv != nil && c.conv.Done() }
