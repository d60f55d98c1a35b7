// Loaded with `node --import` before the cache-tests suite's origin
// (test-engine/server/server.mjs), which listens on every address:
// server.listen(port). This binds a listen call that names no host to
// CONFORMANCE_LISTEN_HOST instead, so the origin stays on the loopback
// address the harness assigns.
import net from 'node:net'

const host = process.env.CONFORMANCE_LISTEN_HOST
if (!host) throw new Error('CONFORMANCE_LISTEN_HOST is not set')

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  const port = args[0]
  const portOnly = typeof port === 'number' || (typeof port === 'string' && /^[0-9]+$/.test(port))
  if (portOnly && typeof args[1] !== 'string') {
    args.splice(0, 1, Number(port), host)
  }
  return listen.apply(this, args)
}
