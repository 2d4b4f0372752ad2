// Drives expo-server-sdk. The SDK reads its base URL from EXPO_BASE_URL when
// it is loaded (build/ExpoClientValues.js), so the Go test sets it in the
// environment. Input: {"calls": [{"sdk": [message, ...]} | {"receipts":
// [ticket id, ...]} | {"raw": body}]}: "sdk" calls
// expo.sendPushNotificationsAsync(messages) (the SDK gzips a body over 1 KB
// itself); "receipts" calls expo.getPushNotificationReceiptsAsync(ids)
// (POST /--/api/v2/push/getReceipts); "raw" POSTs body (say a single
// message object, which the SDK cannot send: sendPushNotificationsAsync
// calls messages.reduce) with fetch, as the SDK's requests look. Output:
// {"results": [{"tickets": [...]} | {"receipts": {id: receipt}} |
// {"error": {...}} | {"status", "body"}, with "wire": the HTTP requests
// the call made]}.
import { Expo } from 'expo-server-sdk';
import { input, print, runCalls, version } from './lib.mjs';

const base = process.env.EXPO_BASE_URL;
if (!base) throw new Error('EXPO_BASE_URL is not set');
const expo = new Expo(input.options ?? {});

const results = await runCalls(async (call) => {
  if (call.raw !== undefined) {
    const res = await fetch(`${base}/--/api/v2/push/send`, {
      method: 'POST',
      headers: {
        Accept: 'application/json',
        'Accept-Encoding': 'gzip, deflate',
        'Content-Type': 'application/json',
      },
      body: JSON.stringify(call.raw),
    });
    const text = await res.text();
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    return { status: res.status, body };
  }
  if (call.receipts !== undefined) {
    return { receipts: await expo.getPushNotificationReceiptsAsync(call.receipts) };
  }
  return { tickets: await expo.sendPushNotificationsAsync(call.sdk) };
}, (e) => ({
  name: e?.constructor?.name,
  message: String(e?.message ?? e),
  statusCode: e?.statusCode ?? null,
  code: e?.code ?? null,
  details: e?.details ?? null,
  errorData: e?.errorData ?? null,
}));

print({ sdk: 'expo-server-sdk', version: version('expo-server-sdk'), node: process.version, results });
