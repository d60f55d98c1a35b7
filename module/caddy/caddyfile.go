package coralcaddy

import (
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("coral", parseGlobalCoral)
}

// parseGlobalCoral reads the global option that configures the coral app:
//
//	{
//	    coral {
//	        listen     IP:PORT
//	        advertise  IP:PORT
//	        bootstrap  IP:PORT...
//	        key_file   PATH
//	        levels     DURATION...
//	        cluster    LEVEL NAME
//	    }
//	}
func parseGlobalCoral(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(App)
	if existing != nil {
		return nil, d.Err("the coral global option may appear only once")
	}
	d.Next() // the option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		prop := d.Val()
		args := d.RemainingArgs()
		one := func() (string, error) {
			if len(args) != 1 {
				return "", d.Errf("%s takes one argument", prop)
			}
			return args[0], nil
		}
		var err error
		switch prop {
		case "listen":
			app.Listen, err = one()
		case "advertise":
			app.Advertise, err = one()
		case "key_file":
			app.KeyFile, err = one()
		case "bootstrap":
			if len(args) == 0 {
				return nil, d.Errf("bootstrap needs at least one IP:PORT")
			}
			app.Bootstrap = append(app.Bootstrap, args...)
		case "levels":
			if len(args) == 0 {
				return nil, d.Errf("levels needs at least one RTT threshold")
			}
			for _, a := range args {
				dur, perr := caddy.ParseDuration(a)
				if perr != nil || dur <= 0 {
					return nil, d.Errf("levels: %q is not a positive duration", a)
				}
				if n := len(app.Levels); n > 0 && dur >= time.Duration(app.Levels[n-1]) {
					return nil, d.Errf("levels must decrease: %s is not below %s", a, time.Duration(app.Levels[n-1]))
				}
				app.Levels = append(app.Levels, caddy.Duration(dur))
			}
		case "cluster":
			if len(args) != 2 {
				return nil, d.Errf("cluster takes a level and a name")
			}
			if lvl, perr := strconv.Atoi(args[0]); perr != nil || lvl < 1 {
				return nil, d.Errf("cluster: level %q must be a number 1..n (level 0 is the global cluster)", args[0])
			}
			if app.Clusters == nil {
				app.Clusters = map[string]string{}
			}
			if _, dup := app.Clusters[args[0]]; dup {
				return nil, d.Errf("cluster for level %s given twice", args[0])
			}
			app.Clusters[args[0]] = args[1]
		default:
			return nil, d.Errf("unknown coral option %q", prop)
		}
		if err != nil {
			return nil, err
		}
	}
	if app.Listen == "" {
		return nil, d.Err("coral: listen IP:PORT is required")
	}
	return httpcaddyfile.App{Name: "coral", Value: caddyconfig.JSON(app, nil)}, nil
}
