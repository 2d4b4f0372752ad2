// Drives twilio. Every domain of the client builds absolute URLs on
// https://<product>.twilio.com and hands each request to its httpClient
// (lib/base/BaseTwilio.js, request()); the library's own RequestClient,
// given as the httpClient option, is subclassed here to send the request
// to the gateway's origin instead (path and query kept). autoRetry stays
// off (the default), so a 429 is not retried.
// Input: {"origin", "accountSid", "authToken", "calls": [{"to", "from",
// "body"}]}: each call is client.messages.create({to, from, body}).
// Output: {"results": [{"sid", "status", "to"} | {"error": {...}}, with
// "wire": the HTTP requests the call made]}.
import twilio from 'twilio';
import { input, print, runCalls, version } from './lib.mjs';

class GatewayRequestClient extends twilio.RequestClient {
  request(opts) {
    const u = new URL(opts.uri);
    return super.request({ ...opts, uri: input.origin + u.pathname + u.search });
  }
}

const client = twilio(input.accountSid, input.authToken, { httpClient: new GatewayRequestClient() });

const results = await runCalls(async (call) => {
  const m = await client.messages.create({ to: call.to, from: call.from, body: call.body });
  return { sid: m.sid, status: m.status, to: m.to };
}, (e) => ({
  name: e?.constructor?.name,
  restException: e instanceof twilio.RestException,
  message: String(e?.message ?? e),
  status: e?.status ?? null,
  code: e?.code ?? null,
  moreInfo: e?.moreInfo ?? null,
}));

print({ sdk: 'twilio', version: version('twilio'), node: process.version, results });
