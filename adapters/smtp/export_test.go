package smtp

import "crypto/tls"

// SetTLSConfig lets the external tests trust their own certificate, which
// Config deliberately has no field for.
func SetTLSConfig(n *Notifier, c *tls.Config) { n.tlsConfig = c }
