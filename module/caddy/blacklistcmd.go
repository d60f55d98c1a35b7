package coralcaddy

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/spf13/cobra"
)

// `caddy coral-blacklist`: the operator's side of the fleet-wide
// blacklist (fleetblacklist.go). Run it where the publisher key lives,
// not on the nodes (they only need the public key):
//
//	caddy coral-blacklist keygen DIR                       DIR/blacklist.key (0600) and DIR/blacklist.pub
//	caddy coral-blacklist sign --key KEY [--valid D] LIST SIGNED
//	                                                       sign LIST as the next version into SIGNED
//	caddy coral-blacklist show [--key PUB] SIGNED          what a signed list holds (verified with --key)
//	caddy coral-blacklist publish [--address A] SIGNED     install it on a node through its admin API

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "coral-blacklist",
		Usage: "keygen|sign|show|publish ...",
		Short: "Makes, signs and publishes Coral's fleet-wide blacklist",
		Long: `
The fleet-wide blacklist is one list of origin domains that every
coral_proxy node with a fleet_blacklist option refuses (403). The
operator signs it with a publisher key; nodes trust the public key,
fetch the signed list from its URL or from one another, and take only
newer versions.

  keygen DIR          a publisher key pair: DIR/blacklist.key (mode
                      0600; keep it here, never on a node) and
                      DIR/blacklist.pub (for every node)
  sign --key KEY [--valid 30d] [--version N] LIST SIGNED
                      sign LIST (a blacklist file: one domain a line,
                      optional expires=DATE, # reason) into SIGNED, as
                      the version after SIGNED's (or --version)
  show [--key PUB] SIGNED
                      print a signed list; with --key, verify it
  publish [--address ADDR] SIGNED
                      install SIGNED on a running node through its
                      admin API (POST /coral/blacklist); nodes that
                      fetch from it take it within their poll interval
`,
		CobraFunc: func(cmd *cobra.Command) {
			keygen := &cobra.Command{Use: "keygen DIR", Short: "Makes a publisher key pair", Args: cobra.ExactArgs(1),
				RunE: func(c *cobra.Command, args []string) error { return blacklistKeygen(args[0], c.OutOrStdout()) }}
			sign := &cobra.Command{Use: "sign --key KEY LIST SIGNED", Short: "Signs a list as the next version", Args: cobra.ExactArgs(2)}
			sign.Flags().String("key", "", "the publisher's private key file (required)")
			// A month: a node that was off for weeks still takes the
			// list it finds. Sign again well within it.
			sign.Flags().String("valid", "30d", "how long nodes may install the list")
			sign.Flags().Uint64("version", 0, "the version (default: one above SIGNED's)")
			sign.RunE = func(c *cobra.Command, args []string) error {
				key, _ := c.Flags().GetString("key")
				validText, _ := c.Flags().GetString("valid")
				version, _ := c.Flags().GetUint64("version")
				valid, err := caddy.ParseDuration(validText)
				if err != nil || valid <= 0 {
					return fmt.Errorf("--valid %q: want a duration such as 30d or 720h", validText)
				}
				return blacklistSign(key, args[0], args[1], valid, version, time.Now(), c.OutOrStdout())
			}
			show := &cobra.Command{Use: "show [--key PUB] SIGNED", Short: "Prints a signed list", Args: cobra.ExactArgs(1)}
			show.Flags().String("key", "", "a publisher public key file to verify it with")
			show.RunE = func(c *cobra.Command, args []string) error {
				pub, _ := c.Flags().GetString("key")
				return blacklistShow(args[0], pub, c.OutOrStdout())
			}
			publish := &cobra.Command{Use: "publish [--address ADDR] SIGNED", Short: "Installs a signed list on a node", Args: cobra.ExactArgs(1)}
			publish.Flags().String("address", caddy.DefaultAdminListen, "the node's admin API address")
			publish.RunE = func(c *cobra.Command, args []string) error {
				addr, _ := c.Flags().GetString("address")
				return blacklistPublish(addr, args[0], c.OutOrStdout())
			}
			cmd.AddCommand(keygen, sign, show, publish)
			cmd.Args = cobra.NoArgs
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		},
	})
}

func blacklistKeygen(dir string, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	priv, pub := filepath.Join(dir, "blacklist.key"), filepath.Join(dir, "blacklist.pub")
	k, err := abuse.GeneratePublisherKey(priv, pub, "made "+time.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "publisher key %s: %s (keep it here), %s (for every node's fleet_blacklist)\n", abuse.KeyFingerprint(k), priv, pub)
	return nil
}

// blacklistSign signs the list file as the next version into signed,
// replacing it whole (a node or web server reading it never sees half).
func blacklistSign(keyFile, listFile, signed string, valid time.Duration, version uint64, now time.Time, out io.Writer) error {
	if keyFile == "" {
		return errors.New("sign: --key KEY is required (the publisher's blacklist.key)")
	}
	key, err := abuse.LoadPublisherKey(keyFile)
	if err != nil {
		return err
	}
	text, err := os.ReadFile(listFile)
	if err != nil {
		return err
	}
	entries, bad := abuse.ParseEntries(text)
	if len(bad) > 0 {
		return fmt.Errorf("%s: %d bad lines, nothing signed: %s", listFile, len(bad), abuse.JoinProblems(bad))
	}
	prev, err := os.ReadFile(signed)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		l, err := abuse.ParseSignedList(prev, []ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
		if err != nil {
			return fmt.Errorf("%s: %w; move it away to start again at version 1, or give --version", signed, err)
		}
		if version == 0 {
			version = l.Version + 1
		} else if version <= l.Version {
			return fmt.Errorf("--version %d: %s is version %d already, and nodes take only newer versions", version, signed, l.Version)
		}
	}
	if version == 0 {
		version = 1
	}
	l, err := abuse.SignList(key, version, now.Truncate(time.Second), now.Add(valid).Truncate(time.Second), entries)
	if err != nil {
		return err
	}
	tmp := signed + ".new"
	if err := os.WriteFile(tmp, l.Raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, signed); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: version %d, %d entries, signed by %s, installable until %s\n", signed, l.Version, len(l.Entries), l.KeyID, l.Expires.Format(time.RFC3339))
	return nil
}

func blacklistShow(signed, pubFile string, out io.Writer) error {
	raw, err := os.ReadFile(signed)
	if err != nil {
		return err
	}
	var l *abuse.SignedList
	verified := "not verified (no --key)"
	if pubFile != "" {
		keys, err := abuse.LoadPublisherPublicKeys(pubFile)
		if err != nil {
			return err
		}
		if l, err = abuse.ParseSignedList(raw, keys); err != nil {
			return fmt.Errorf("%s: %w", signed, err)
		}
		verified = "signature verified"
	} else if l, err = abuse.DecodeSignedList(raw); err != nil {
		return fmt.Errorf("%s: %w", signed, err)
	}
	fmt.Fprintf(out, "version %d, signed %s by key %s (%s), installable until %s, %d entries\n",
		l.Version, l.Signed.Format(time.RFC3339), l.KeyID, verified, l.Expires.Format(time.RFC3339), len(l.Entries))
	for _, e := range l.Entries {
		fmt.Fprintln(out, "  "+e.String())
	}
	return nil
}

func blacklistPublish(address, signed string, out io.Writer) error {
	raw, err := os.ReadFile(signed)
	if err != nil {
		return err
	}
	if _, err := abuse.DecodeSignedList(raw); err != nil {
		return fmt.Errorf("%s: %w", signed, err)
	}
	// A refusal (400: does not verify; 409: not newer) comes back as an
	// error carrying the node's JSON answer: its outcome and why.
	resp, err := caddycmd.AdminAPIRequest(address, http.MethodPost, "/coral/blacklist",
		http.Header{"Content-Type": {"text/plain"}}, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("publishing %s at %s: %w", signed, address, err)
	}
	defer resp.Body.Close()
	var doc adminBlacklist
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return fmt.Errorf("publishing %s at %s: %w", signed, address, err)
	}
	fmt.Fprintf(out, "%s: %s at %s; version %d in force there, %d entries\n", signed, doc.Outcome, address, doc.Version, doc.Entries)
	return nil
}
