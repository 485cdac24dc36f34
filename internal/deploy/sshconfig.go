package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// FR-016: a host-key option the config file sets is not given. ssh -G
// shows the file's effect only when the value differs from ssh's own
// default (StrictHostKeyChecking ask, for one), so the file's own lines
// are read too: an option that a line sets for the host counts as set,
// whatever its value.

// maxIncludeDepth is ssh's own bound on nested Include files.
const maxIncludeDepth = 16

// configLines is what a config file's own lines say of the host-key
// options for one host: set, in the part before any Host or Match line or
// under a Host line whose patterns take the host; maybe, under a Match
// line, which depends on more than the name (the user, a command's exit,
// canonicalization) and is not evaluated here.
type configLines struct {
	host  string
	set   map[string]bool
	maybe map[string]bool
}

// configFileSets reads the ssh config file at file (and the files it
// includes) for host, as ssh would with -F file host.
func configFileSets(file, host string) (set, maybe map[string]bool, err error) {
	c := &configLines{host: host, set: map[string]bool{}, maybe: map[string]bool{}}
	if err := c.read(file, blockApplies, 0); err != nil {
		return nil, nil, err
	}
	return c.set, c.maybe, nil
}

// block is how the block a line is in applies to the host.
type block int

const (
	blockApplies block = iota
	blockNever
	blockMaybe // under a Match line
)

func (c *configLines) read(file string, outer block, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("%s: Include nested more than %d deep", file, maxIncludeDepth)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		if depth > 0 {
			return nil // ssh passes over an included file it cannot open
		}
		return err
	}
	cur := outer
	for n, line := range strings.Split(string(raw), "\n") {
		keyword, args := configLine(line)
		switch keyword = strings.ToLower(keyword); keyword {
		case "":
		case "host":
			// An included file's Host and Match lines take effect only
			// where the Include line itself applies.
			switch {
			case outer != blockApplies:
				cur = outer
			case hostMatches(c.host, args):
				cur = blockApplies
			default:
				cur = blockNever
			}
		case "match":
			switch {
			case outer == blockNever:
				cur = blockNever
			case outer == blockApplies && len(args) == 1 && strings.EqualFold(args[0], "all"):
				cur = blockApplies
			default:
				cur = blockMaybe
			}
		case "include":
			for _, pattern := range args {
				files, err := includeFiles(pattern)
				if err != nil {
					return fmt.Errorf("%s line %d: Include %s: %w", file, n+1, pattern, err)
				}
				for _, f := range files {
					if err := c.read(f, cur, depth+1); err != nil {
						return err
					}
				}
			}
		default:
			for _, k := range hostKeyOptions {
				if keyword != k {
					continue
				}
				switch cur {
				case blockApplies:
					c.set[k] = true
				case blockMaybe:
					c.maybe[k] = true
				case blockNever:
				}
			}
		}
	}
	return nil
}

// hostMatches is ssh's Host line: the host matches when a pattern takes
// it and no negated (!) pattern does; patterns hold * and ?, and compare
// case-sensitively with the name as given.
func hostMatches(host string, patterns []string) bool {
	matched := false
	for _, p := range patterns {
		negated := strings.HasPrefix(p, "!")
		if ok, _ := path.Match(globOnly(strings.TrimPrefix(p, "!")), host); ok {
			if negated {
				return false
			}
			matched = true
		}
	}
	return matched
}

// globOnly quotes what path.Match would read beyond ssh's * and ?.
func globOnly(p string) string {
	var b strings.Builder
	for _, r := range p {
		if r == '[' || r == ']' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// includeFiles are the files of an Include pattern: ~ expanded, a
// relative one under ~/.ssh (as for a user's config, which ssh takes an
// -F file for), in glob order.
func includeFiles(pattern string) ([]string, error) {
	p, err := sshdial.ExpandHome(pattern)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(p) {
		home, err := sshdial.ExpandHome("~/.ssh")
		if err != nil {
			return nil, err
		}
		p = filepath.Join(home, p)
	}
	return filepath.Glob(p)
}

// configLine splits an ssh config line into its keyword and arguments as
// ssh does: the keyword ends at white space or =; the arguments are words,
// grouped by double or single quotes, a backslash escaping the next
// character; a word that starts with # begins a comment.
func configLine(line string) (string, []string) {
	line = strings.TrimLeft(line, " \t\r")
	end := strings.IndexAny(line, " \t\r=")
	if end < 0 {
		end = len(line)
	}
	keyword, rest := line[:end], strings.TrimLeft(line[end:], " \t\r")
	if strings.HasPrefix(keyword, "#") {
		return "", nil
	}
	rest = strings.TrimLeft(strings.TrimPrefix(rest, "="), " \t\r")
	var args []string
	var word strings.Builder
	inWord, quote := false, rune(0)
	for i := 0; i < len(rest); i++ {
		ch := rune(rest[i])
		switch {
		case ch == '\\' && i+1 < len(rest):
			i++
			word.WriteByte(rest[i])
			inWord = true
		case quote != 0:
			if ch == quote {
				quote = 0
			} else {
				word.WriteRune(ch)
			}
		case ch == '"' || ch == '\'':
			quote, inWord = ch, true
		case ch == ' ' || ch == '\t' || ch == '\r':
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			i = len(rest)
		default:
			word.WriteRune(ch)
			inWord = true
		}
	}
	if inWord {
		args = append(args, word.String())
	}
	return keyword, args
}
