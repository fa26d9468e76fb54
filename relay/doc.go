// Package relay carries an upstream's bytes to a client: the writer of
// answers on the plain port and inside intercepted tunnels, and the byte
// relay of tunnels and protocol switches.
package relay
