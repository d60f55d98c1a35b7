// Loaded with `node --import` before the cache-tests suite's client
// (test-engine/cli.mjs, run in the suite's directory), which sends
// everything to one base URL: its control requests (PUT /config/UUID
// before a test, GET /state/UUID after it) as well as the test requests
// (/test/UUID). The control requests are the suite's bookkeeping, not
// traffic a cache should see, so they go straight to the origin
// (CONFORMANCE_ORIGIN, "http://ADDR:PORT") for every implementation. Test
// requests go to the cache; when CONFORMANCE_HOST is set they carry it as
// Host (coral_proxy serves Coralized names only). fetch() ignores a Host
// field, so it is set below fetch, in the dispatcher (undici, the suite's
// own dependency), on top of any dispatcher the suite chose.
import { createRequire } from 'node:module'
import path from 'node:path'

const origin = process.env.CONFORMANCE_ORIGIN
if (!origin) throw new Error('CONFORMANCE_ORIGIN is not set')
const host = process.env.CONFORMANCE_HOST || ''

const undici = createRequire(path.join(process.cwd(), 'package.json'))('undici')

function withHost (headers) {
  if (headers == null) return { host }
  if (Array.isArray(headers)) {
    const flat = headers.length > 0 && Array.isArray(headers[0]) ? headers.flat() : [...headers]
    return [...flat, 'host', host]
  }
  if (typeof headers[Symbol.iterator] === 'function') return [...[...headers].flat(), 'host', host]
  return { ...headers, host }
}

const setHost = dispatch => (opts, handler) => dispatch({ ...opts, headers: withHost(opts.headers) }, handler)
const defaultDispatcher = new undici.Agent()

const cacheFetch = globalThis.fetch
globalThis.fetch = function (input, init) {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url)
  if (url.pathname.startsWith('/config/') || url.pathname.startsWith('/state/')) {
    return cacheFetch(origin + url.pathname + url.search, init)
  }
  if (host !== '' && url.pathname.startsWith('/test/')) {
    init = { ...init, dispatcher: (init?.dispatcher || defaultDispatcher).compose(setHost) }
  }
  return cacheFetch(input, init)
}
