// Egress interception inside this Node process only, loaded before the
// driver with `node --import ./intercept.mjs` (the Go tests put it in
// NODE_OPTIONS): it is what a DNS record, a hosts file entry or a service
// mesh does for a deployment (docs/egress-interception.md), kept to the
// test process so that nothing on the machine changes.
//
// FREQCAP_EGRESS lists host:port=port entries, comma separated:
// "fcm.googleapis.com:443=43211" sends connections to fcm.googleapis.com
// port 443 to 127.0.0.1 port 43211, where the gateway answers for
// fcm.googleapis.com with a certificate of the test CA (in
// NODE_EXTRA_CA_CERTS). Two patches do it:
//
//   - dns.lookup (and dns.promises.lookup) answers 127.0.0.1 for the listed
//     names and fails every other name with ENOTFOUND, so that nothing an
//     SDK tries (Google's OAuth or metadata server, the real provider) can
//     leave the machine;
//   - net.Socket.prototype.connect, which every client connection goes
//     through (net.connect, tls.connect, and so https.request, http2.connect
//     and undici), moves port 443 of a listed name to the gateway's port.
//     Only the port changes: the socket still connects to the name, so
//     tls.connect still sends it as SNI and verifies the certificate
//     against it. Nothing skips verification.
import dns from 'node:dns';
import net from 'node:net';

const routes = new Map(); // "host:port" -> port
for (const entry of (process.env.FREQCAP_EGRESS ?? '').split(',')) {
  if (!entry.trim()) continue;
  const m = /^([a-z0-9.-]+):(\d+)=(\d+)$/i.exec(entry.trim());
  if (!m) throw new Error(`FREQCAP_EGRESS: ${JSON.stringify(entry)} is not host:port=port`);
  routes.set(`${m[1].toLowerCase()}:${Number(m[2])}`, Number(m[3]));
}
const names = new Set([...routes.keys()].map((k) => k.slice(0, k.lastIndexOf(':'))));

// lookups records every name looked up, and what it was answered.
export const lookups = [];

function resolve(hostname) {
  const name = String(hostname).toLowerCase().replace(/\.$/, '');
  if (names.has(name) || name === 'localhost') return '127.0.0.1';
  return null;
}

function notFound(hostname) {
  const err = new Error(`getaddrinfo ENOTFOUND ${hostname} (conformance/node/intercept.mjs lets only ${[...names].join(', ')} resolve)`);
  err.code = 'ENOTFOUND';
  err.errno = -3008;
  err.syscall = 'getaddrinfo';
  err.hostname = hostname;
  return err;
}

function lookup(hostname, options, callback) {
  if (typeof options === 'function') [callback, options] = [options, {}];
  const all = typeof options === 'object' && options !== null && options.all;
  const address = resolve(hostname);
  lookups.push({ hostname, address });
  process.nextTick(() => {
    if (!address) return callback(notFound(hostname));
    if (all) return callback(null, [{ address, family: 4 }]);
    callback(null, address, 4);
  });
}
dns.lookup = lookup;
dns.promises.lookup = async (hostname, options) => {
  const address = resolve(hostname);
  lookups.push({ hostname, address });
  if (!address) throw notFound(hostname);
  return options?.all ? [{ address, family: 4 }] : { address, family: 4 };
};

function route(host, port) {
  if (host == null || port == null) return undefined;
  return routes.get(`${String(host).toLowerCase()}:${Number(port)}`);
}

const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  // connect(options[, cb]), connect(port[, host][, cb]), or (inside node)
  // connect(normalizedArgs), whose first element is the options.
  const options = Array.isArray(args[0]) ? args[0][0] : args[0];
  if (options !== null && typeof options === 'object') {
    const to = route(options.host, options.port);
    if (to !== undefined) options.port = to;
  } else if (typeof args[1] === 'string') {
    const to = route(args[1], args[0]);
    if (to !== undefined) args[0] = to;
  }
  return connect.apply(this, args);
};
