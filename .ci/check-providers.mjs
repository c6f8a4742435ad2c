// check-providers.mjs is run by .ci/check-providers.sh (make check-providers):
// it signs deliveries with the providers' own Node libraries (or, where a
// library only verifies, signs as the provider's page prescribes and has the
// library confirm it) and sends them to a running hookgate whose senders
// check-providers.sh configured: accepted, replayed, tampered and refused,
// handshakes answered. `node check-providers.mjs keys` prints the public keys
// of the key pairs it makes (Discord, SendGrid) as shell assignments.
import fs from "fs";
import crypto from "crypto";
import twilio from "twilio";
import { WebhooksHelper } from "square";
import hub from "@hubspot/api-client";
import { verifyKey } from "discord-interactions";
import * as line from "@line/bot-sdk";
import Razorpay from "razorpay";
import { EventWebhook } from "@sendgrid/eventwebhook";
import { sign as ghSign, verify as ghVerify } from "@octokit/webhooks-methods";
import Mux from "@mux/mux-node";

if (process.argv[2] === "keys") {
  const seed = crypto.randomBytes(32);
  fs.writeFileSync("discord.seed", seed);
  const dpk = crypto.createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
  const { privateKey } = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
  fs.writeFileSync("sendgrid.pem", privateKey.export({ format: "pem", type: "pkcs8" }));
  console.log("DC=" + crypto.createPublicKey(dpk).export({ format: "der", type: "spki" }).subarray(12).toString("hex"));
  console.log("SG=" + crypto.createPublicKey(privateKey).export({ format: "der", type: "spki" }).toString("base64"));
  process.exit(0);
}

const B = process.env.HOOKGATE_URL;
const env = process.env;
let fails = 0;
function check(name, cond, detail) { if (!cond) { fails++; console.log("FAIL", name, detail ?? ""); } else console.log("ok  ", name); }
async function post(path, body, headers) {
  const r = await fetch(B + path, { method: "POST", body, headers });
  return { status: r.status, ct: r.headers.get("content-type"), replayed: r.headers.get("idempotent-replayed"), body: await r.text() };
}
// Twilio form, no public_url: the URL is the request's own.
{
  const params = { MessageSid: "SM" + Date.now(), From: "+15551230000", To: "+15559870000", Body: "Hi & bye = ok" };
  const url = B + "/webhooks/twilio?x=1";
  const sig = twilio.getExpectedTwilioSignature(env.TW, url, params);
  check("twilio lib validates its own", twilio.validateRequest(env.TW, sig, url, params));
  const body = new URLSearchParams(params).toString();
  const h = { "Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": sig, "I-Twilio-Idempotency-Token": "idem-" + params.MessageSid };
  const a = await post("/webhooks/twilio?x=1", body, h);
  check("twilio form 202", a.status === 202, JSON.stringify(a));
  const b = await post("/webhooks/twilio?x=1", body, h);
  check("twilio form replay", b.status === 202 && b.replayed === "true" && b.body === a.body, JSON.stringify(b));
  const c = await post("/webhooks/twilio?x=1", body.replace("Hi", "Ho"), { ...h, "I-Twilio-Idempotency-Token": "idem-t" });
  check("twilio tampered 401", c.status === 401, JSON.stringify(c));
  const d = await post("/webhooks/twilio?x=1", body, { ...h, "X-Twilio-Signature": twilio.getExpectedTwilioSignature("wrong", url, params), "I-Twilio-Idempotency-Token": "idem-w" });
  check("twilio wrong secret 401", d.status === 401, JSON.stringify(d));
  const { ["X-Twilio-Signature"]: _, ...nosig } = h;
  const e = await post("/webhooks/twilio?x=1", body, { ...nosig, "I-Twilio-Idempotency-Token": "idem-n" });
  check("twilio missing 401", e.status === 401, JSON.stringify(e));
  // public_url
  const purl = "https://hooks.example.com/webhooks/twilio";
  const psig = twilio.getExpectedTwilioSignature(env.TW, purl, params);
  const f = await post("/webhooks/twilio-pub", body, { ...h, "X-Twilio-Signature": psig });
  check("twilio public_url 202", f.status === 202, JSON.stringify(f));
  // JSON with bodySHA256
  const jb = JSON.stringify({ sid: "CA" + Date.now() });
  const hash = crypto.createHash("sha256").update(jb).digest("hex");
  const jurl = B + "/webhooks/twilio?bodySHA256=" + hash;
  const jsig = twilio.getExpectedTwilioSignature(env.TW, jurl, {});
  check("twilio lib json", twilio.validateRequestWithBody(env.TW, jsig, jurl, jb));
  const g = await post("/webhooks/twilio?bodySHA256=" + hash, jb, { "Content-Type": "application/json", "X-Twilio-Signature": jsig, "I-Twilio-Idempotency-Token": "idem-j" + hash });
  check("twilio json 202", g.status === 202, JSON.stringify(g));
}
// Square
{
  const body = JSON.stringify({ merchant_id: "M1", type: "payment.created", event_id: "evt-" + Date.now(), data: { id: "p1" } });
  const url = B + "/webhooks/square";
  const sig = crypto.createHmac("sha256", env.SQ).update(url + body).digest("base64");
  check("square lib", await WebhooksHelper.verifySignature({ requestBody: body, signatureHeader: sig, signatureKey: env.SQ, notificationUrl: url }));
  const h = { "Content-Type": "application/json", "x-square-hmacsha256-signature": sig };
  const a = await post("/webhooks/square", body, h);
  check("square 202", a.status === 202, JSON.stringify(a));
  const b = await post("/webhooks/square", body, h);
  check("square replay", b.replayed === "true" && b.body === a.body, JSON.stringify(b));
  const c = await post("/webhooks/square", body.replace("p1", "p2"), h);
  check("square tampered 401", c.status === 401, JSON.stringify(c));
}
// HubSpot v3
{
  const body = JSON.stringify([{ eventId: Date.now(), subscriptionId: 1, portalId: 2, occurredAt: Date.now(), subscriptionType: "contact.creation", attemptNumber: 0, objectId: 3 }]);
  const url = B + "/webhooks/hubspot";
  const ts = Date.now();
  const sig = hub.Signature.getSignature("POST", "v3", { clientSecret: env.HS, requestBody: body, url, timestamp: ts });
  check("hubspot lib", hub.Signature.isValid({ method: "POST", signatureVersion: "v3", signature: sig, clientSecret: env.HS, requestBody: body, url, timestamp: ts }));
  const h = { "Content-Type": "application/json", "X-HubSpot-Signature-v3": sig, "X-HubSpot-Request-Timestamp": String(ts) };
  const a = await post("/webhooks/hubspot", body, h);
  check("hubspot 202", a.status === 202, JSON.stringify(a));
  const b = await post("/webhooks/hubspot", body, h);
  check("hubspot replay", b.replayed === "true", JSON.stringify(b));
  const old = ts - 301000;
  const osig = hub.Signature.getSignature("POST", "v3", { clientSecret: env.HS, requestBody: body, url, timestamp: old });
  const c = await post("/webhooks/hubspot", body, { ...h, "X-HubSpot-Signature-v3": osig, "X-HubSpot-Request-Timestamp": String(old) });
  check("hubspot stale 401", c.status === 401, JSON.stringify(c));
}
// Discord
{
  const seed = fs.readFileSync("discord.seed");
  const pk = crypto.createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
  const sign = (ts, body) => crypto.sign(null, Buffer.from(ts + body), pk).toString("hex");
  const ts = String(Math.floor(Date.now() / 1000));
  const ping = JSON.stringify({ id: "1", type: 1, application_id: "2" });
  const s = sign(ts, ping);
  check("discord lib", await verifyKey(ping, s, ts, env.DC));
  const a = await post("/webhooks/discord", ping, { "Content-Type": "application/json", "X-Signature-Ed25519": s, "X-Signature-Timestamp": ts });
  check("discord PING", a.status === 200 && a.body === '{"type":1}', JSON.stringify(a));
  const b = await post("/webhooks/discord", ping, { "Content-Type": "application/json", "X-Signature-Ed25519": sign(ts, ping + " "), "X-Signature-Timestamp": ts });
  check("discord bad sig 401", b.status === 401, JSON.stringify(b));
  const cmd = JSON.stringify({ id: String(Date.now()), type: 2, data: { name: "hi" } });
  const c = await post("/webhooks/discord", cmd, { "Content-Type": "application/json", "X-Signature-Ed25519": sign(ts, cmd), "X-Signature-Timestamp": ts });
  check("discord command 202", c.status === 202, JSON.stringify(c));
}
// Zoom
{
  const ts = String(Date.now());
  const sign = (body) => "v0=" + crypto.createHmac("sha256", env.ZM).update(`v0:${ts}:${body}`).digest("hex");
  const val = JSON.stringify({ payload: { plainToken: "qgg8vlvZRS6UYooatFL8Aw" }, event_ts: 1654503849680, event: "endpoint.url_validation" });
  const a = await post("/webhooks/zoom", val, { "Content-Type": "application/json", "x-zm-signature": sign(val), "x-zm-request-timestamp": ts });
  const want = crypto.createHmac("sha256", env.ZM).update("qgg8vlvZRS6UYooatFL8Aw").digest("hex");
  let j = {}; try { j = JSON.parse(a.body); } catch {}
  check("zoom url_validation", a.status === 200 && j.plainToken === "qgg8vlvZRS6UYooatFL8Aw" && j.encryptedToken === want, JSON.stringify(a));
  const ev = JSON.stringify({ event: "meeting.started", event_ts: Date.now(), payload: { object: { id: 1 } } });
  const b = await post("/webhooks/zoom", ev, { "Content-Type": "application/json", "x-zm-signature": sign(ev), "x-zm-request-timestamp": ts });
  check("zoom event 202", b.status === 202, JSON.stringify(b));
}
// Twitch
{
  const ts = new Date().toISOString();
  const sign = (id, body) => "sha256=" + crypto.createHmac("sha256", env.TT).update(id + ts + body).digest("hex");
  const ver = JSON.stringify({ challenge: "pogchamp-kappa-360noscope-vohiyo", subscription: { id: "s1", type: "channel.follow" } });
  const h = (id, type, body) => ({ "Content-Type": "application/json", "Twitch-Eventsub-Message-Id": id, "Twitch-Eventsub-Message-Timestamp": ts, "Twitch-Eventsub-Message-Type": type, "Twitch-Eventsub-Message-Signature": sign(id, body) });
  const a = await post("/webhooks/twitch", ver, h("v1", "webhook_callback_verification", ver));
  check("twitch verification", a.status === 200 && a.body === "pogchamp-kappa-360noscope-vohiyo", JSON.stringify(a));
  const n = JSON.stringify({ subscription: { type: "channel.follow" }, event: { user_id: "1" } });
  const id = "m" + Date.now();
  const b = await post("/webhooks/twitch", n, h(id, "notification", n));
  check("twitch notification 202", b.status === 202, JSON.stringify(b));
  const c = await post("/webhooks/twitch", n, h(id, "notification", n));
  check("twitch replay", c.replayed === "true", JSON.stringify(c));
}
// Mailgun
{
  const ts = String(Math.floor(Date.now() / 1000)), token = crypto.randomBytes(25).toString("hex");
  const sig = crypto.createHmac("sha256", env.MG).update(ts + token).digest("hex");
  const body = JSON.stringify({ signature: { timestamp: ts, token, signature: sig }, "event-data": { id: "ev" + Date.now(), event: "delivered" } });
  const a = await post("/webhooks/mailgun", body, { "Content-Type": "application/json" });
  check("mailgun 202", a.status === 202, JSON.stringify(a));
  const b = await post("/webhooks/mailgun", body.replace(sig, sig.replace(/^./, sig[0] === "a" ? "b" : "a")), { "Content-Type": "application/json" });
  check("mailgun bad sig 401", b.status === 401, JSON.stringify(b));
}
// Airtable
{
  const body = JSON.stringify({ base: { id: "app1" }, webhook: { id: "ach1" }, timestamp: new Date().toISOString() });
  const mac = "hmac-sha256=" + crypto.createHmac("sha256", Buffer.from(env.AT, "base64")).update(body, "ascii").digest("hex");
  const a = await post("/webhooks/airtable", body, { "Content-Type": "application/json", "X-Airtable-Content-MAC": mac });
  check("airtable 202", a.status === 202, JSON.stringify(a));
}
// Meta GET
{
  const r = await fetch(B + "/webhooks/meta?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=" + env.MV);
  const t = await r.text();
  check("meta GET 200", r.status === 200 && t === "1158201444", r.status + " " + t);
  const r2 = await fetch(B + "/webhooks/meta?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=nope");
  check("meta GET wrong 403", r2.status === 403, String(r2.status));
}
const now = Date.now();
{ // LINE
  const body = JSON.stringify({ destination: "U1", events: [{ type: "message", webhookEventId: "01H" + now, deliveryContext: { isRedelivery: false } }] });
  const sig = crypto.createHmac("sha256", env.LN).update(body).digest("base64");
  check("line lib", line.validateSignature(body, env.LN, sig));
  const a = await post("/webhooks/line", body, { "Content-Type": "application/json", "x-line-signature": sig });
  check("line 202", a.status === 202, JSON.stringify(a));
  const b = await post("/webhooks/line", body, { "Content-Type": "application/json", "x-line-signature": sig });
  check("line replay", b.replayed === "true", JSON.stringify(b));
}
{ // Razorpay
  const body = JSON.stringify({ entity: "event", event: "payment.captured", payload: {} });
  const sig = crypto.createHmac("sha256", env.RP).update(body).digest("hex");
  check("razorpay lib", Razorpay.validateWebhookSignature(body, sig, env.RP));
  const a = await post("/webhooks/razorpay", body, { "Content-Type": "application/json", "X-Razorpay-Signature": sig, "X-Razorpay-Event-Id": "ev" + now });
  check("razorpay 202", a.status === 202, JSON.stringify(a));
}
{ // Paddle (its SDK's check, re-done here: ts=..;h1=hex HMAC("ts:body"))
  const body = JSON.stringify({ event_id: "evt_" + now, event_type: "transaction.completed", data: {} });
  const ts = Math.floor(now / 1000);
  const h1 = crypto.createHmac("sha256", env.PD).update(`${ts}:${body}`).digest("hex");
  const a = await post("/webhooks/paddle", body, { "Content-Type": "application/json", "Paddle-Signature": `ts=${ts};h1=${h1}` });
  check("paddle 202", a.status === 202, JSON.stringify(a));
}
{ // Mux
  const mux = new Mux({ tokenId: "x", tokenSecret: "y", webhookSecret: env.MX });
  const body = JSON.stringify({ id: "mux-" + now, type: "video.asset.ready", data: {} });
  const t = Math.floor(now / 1000);
  const v1 = crypto.createHmac("sha256", env.MX).update(`${t}.${body}`).digest("hex");
  const headers = { "mux-signature": `t=${t},v1=${v1}` };
  let ok = true; try { await mux.webhooks.verifySignature(body, headers, env.MX); } catch (e) { ok = false; console.log(e.message); }
  check("mux lib", ok);
  const a = await post("/webhooks/mux", body, { "Content-Type": "application/json", ...headers });
  check("mux 202", a.status === 202, JSON.stringify(a));
}
{ // SendGrid
  const privateKey = crypto.createPrivateKey(fs.readFileSync("sendgrid.pem"));
  const pubB64 = crypto.createPublicKey(privateKey).export({ format: "der", type: "spki" }).toString("base64");
  const body = JSON.stringify([{ email: "a@example.com", event: "delivered", sg_event_id: "sg" + now, timestamp: 1 }]) + "\r\n";
  const ts = String(Math.floor(now / 1000));
  const sig = crypto.sign("sha256", Buffer.from(ts + body), privateKey).toString("base64");
  const ew = new EventWebhook();
  check("sendgrid lib", ew.verifySignature(ew.convertPublicKeyToECDSA(pubB64), body, sig, ts));
  const a = await post("/webhooks/sendgrid", body, { "Content-Type": "application/json", "X-Twilio-Email-Event-Webhook-Signature": sig, "X-Twilio-Email-Event-Webhook-Timestamp": ts });
  check("sendgrid 202", a.status === 202, JSON.stringify(a));
}
{ // GitHub via Octokit
  const body = JSON.stringify({ action: "opened", number: 1 });
  const sig = await ghSign(env.GH, body);
  check("octokit verify", await ghVerify(env.GH, body, sig));
  const a = await post("/webhooks/github", body, { "Content-Type": "application/json", "X-Hub-Signature-256": sig, "X-GitHub-Delivery": "gh-" + now, "X-GitHub-Event": "pull_request" });
  check("github 202", a.status === 202, JSON.stringify(a));
}
console.log(fails ? `${fails} FAILED` : "all ok");
process.exit(fails ? 1 : 0);