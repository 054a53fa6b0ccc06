// Package domain is the service "send unless already sent": it decodes a
// shipment event, renders one message per channel, and sends each through
// the claim / send / record-or-release protocol of DESIGN.md section 4, so a
// replayed event reaches no customer twice. It depends on the standard
// library and ports only.
package domain
