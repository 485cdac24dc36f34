package sshdial

import (
	"regexp"
	"strings"
)

var (
	pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`)
	longBlob = regexp.MustCompile(`[A-Za-z0-9+/=]{200,}`)
)

// Sanitize makes an error text safe to store and show: no private key block
// and no long base64 run (which could be key material) survives, and the text
// stays on one line.
func Sanitize(msg string) string {
	msg = pemBlock.ReplaceAllString(msg, "[private key removed]")
	msg = longBlob.ReplaceAllString(msg, "[data removed]")
	msg = strings.Join(strings.Fields(msg), " ")
	return msg
}
