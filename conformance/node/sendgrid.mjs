// Drives @sendgrid/mail. The base URL: Client.setApiKey sets the default
// request's baseUrl to the region's host (src/classes/client.js), so the
// key is set first and then client.setDefaultRequest('baseUrl', <gateway>),
// and the client is given to the mail service with sgMail.setClient(client).
// Input: {"baseUrl", "apiKey", "calls": [{"msg": {...}}]}: each call is
// sgMail.send(msg). Output: {"results": [{"statusCode"} | {"error": {...}},
// with "wire": the HTTP requests the call made]}.
import sgMail from '@sendgrid/mail';
import sgClient from '@sendgrid/client';
import { input, print, runCalls, version } from './lib.mjs';

const client = new sgClient.Client();
client.setApiKey(input.apiKey);
client.setDefaultRequest('baseUrl', input.baseUrl);
sgMail.setClient(client);

const results = await runCalls(async (call) => {
  const [response] = await sgMail.send(call.msg);
  return { statusCode: response.statusCode, headers: response.headers };
}, (e) => ({
  name: e?.constructor?.name,
  message: String(e?.message ?? e),
  code: e?.code ?? null,
  body: e?.response?.body ?? null,
  headers: e?.response?.headers ? JSON.parse(JSON.stringify(e.response.headers)) : null,
  text: String(e),
}));

print({ sdk: '@sendgrid/mail', version: version('@sendgrid/mail'), node: process.version, results });
