// Package shell writes values into POSIX shell commands: the one quoter of
// the project, for the scripts it runs on hosts and the commands it gives
// OpenSSH (a ProxyCommand).
package shell

import "strings"

// Quote is s as one word of a POSIX shell command, whatever it holds. A
// word of letters, digits and "/._,:@+%-" is left as it is (a command line
// in a log stays readable); any other is put in single quotes, inside which
// the shell expands nothing, each single quote in s written as
//
//	'\''
//
// (close the quotes, an escaped quote, open them again).
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._,:@+%-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
