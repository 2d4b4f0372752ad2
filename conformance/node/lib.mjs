// Shared by the SDK drivers: the input (argv[2], JSON), the result (one JSON
// document on stdout), and a record of every HTTP request the process
// makes, taken from Node's diagnostics channels (undici's for fetch, node:http's
// for axios and https.request) and, for HTTP/2, which Node 20 has no
// channels for, from the streams of every session http2.connect opens (so
// for firebase-admin's sendEach and node-apn), so that the Go tests can see
// how many requests an SDK call made (no retry) and what each was answered.
import dc from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';

export const input = JSON.parse(process.argv[2] ?? '{}');

const wire = [];
const records = new WeakMap();

function header(headers, name) {
  if (!headers) return null;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === name) return String(headers[i + 1]);
    }
    return null;
  }
  if (typeof headers === 'string') {
    for (const line of headers.split('\r\n')) {
      const at = line.indexOf(':');
      if (at > 0 && line.slice(0, at).trim().toLowerCase() === name) return line.slice(at + 1).trim();
    }
  }
  return null;
}

dc.subscribe('undici:request:create', ({ request }) => {
  const rec = {
    method: request.method,
    url: String(request.origin) + request.path,
    contentEncoding: header(request.headers, 'content-encoding'),
    status: null,
  };
  records.set(request, rec);
  wire.push(rec);
});
dc.subscribe('undici:request:headers', ({ request, response }) => {
  const rec = records.get(request);
  if (rec) rec.status = response.statusCode;
});
dc.subscribe('http.client.request.start', ({ request }) => {
  const ce = request.getHeader('content-encoding');
  const rec = {
    method: request.method,
    url: `${request.protocol}//${request.host}${request.path}`,
    contentEncoding: ce == null ? null : String(ce),
    status: null,
  };
  records.set(request, rec);
  wire.push(rec);
});
dc.subscribe('http.client.response.finish', ({ request, response }) => {
  const rec = records.get(request);
  if (rec) rec.status = response.statusCode;
});

// http2.connect is looked up on the module when it is called (SDKs hold the
// module, not the function), so wrapping it here sees every session.
const connect = http2.connect;
http2.connect = function (authority, ...rest) {
  const session = connect.call(this, authority, ...rest);
  const origin = typeof authority === 'string' ? new URL(authority).origin : authority.origin;
  const request = session.request;
  session.request = function (headers, ...more) {
    const ce = headers?.['content-encoding'];
    const rec = {
      method: headers?.[':method'] ?? 'GET',
      url: origin + (headers?.[':path'] ?? '/'),
      contentEncoding: ce == null ? null : String(ce),
      status: null,
      http2: true,
    };
    wire.push(rec);
    const stream = request.call(this, headers, ...more);
    stream.on('response', (h) => {
      rec.status = h[':status'];
    });
    return stream;
  };
  return session;
};

// takeWire returns the requests made since the last call.
export function takeWire() {
  return wire.splice(0);
}

// print writes the result and ends the process (SDK clients may keep
// sockets open).
export function print(result) {
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
}

// run runs each call of input.calls in order with fn, timing it and
// recording its requests; a call that throws gives {error: describe(e)}.
export async function runCalls(fn, describe) {
  const results = [];
  for (const call of input.calls ?? []) {
    takeWire();
    const start = Date.now();
    let result;
    try {
      result = await fn(call);
    } catch (e) {
      result = { error: describe(e) };
    }
    result.ms = Date.now() - start;
    result.wire = takeWire();
    results.push(result);
  }
  return results;
}

// version is the installed version of package name (read from its
// package.json, which some packages do not export).
export function version(name) {
  const file = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(file, 'utf8')).version;
}
