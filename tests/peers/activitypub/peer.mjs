// A real Fedify 2.3.6 server used as switchboard's ActivityPub interop peer.
//
// One actor, `alice`, with RSA and Ed25519 keys; inbox verification ON (Fedify's defaults:
// HTTP signatures, FEP-8b32 proofs). Listens on 127.0.0.1:$PEER_PORT and, besides the
// federation routes, answers a small admin API the tests drive:
//   POST /admin/follow   {"target": actorUrl}                         -> sends Follow
//   POST /admin/note     {"target": actorUrl, "text", "visibility", "mention"} -> sends Create(Note)
//   POST /admin/lookup   {"target": actorUrl or "@user@host"}           -> {id, preferredUsername}
//   POST /admin/profile  {"target": actorUrl}  -> the actor's profile as Fedify reads it: type,
//        icon, image, fields (PropertyValue attachments), the featured collection's notes, the
//        first of them looked up at its id, discoverable, indexable
//   GET  /admin/received                                              -> activities received (JSON-LD)
//   POST /admin/quote    {"target": noteUrl} -> sends the note's author a QuoteRequest (FEP-044f)
//        for a new note of alice's quoting it: {id, note, canQuote} (who the note's
//        interactionPolicy lets quote it, as Fedify reads it)
//   POST /admin/authorization {"target": url} -> a QuoteAuthorization as Fedify reads it
//   GET  /admin/moves    -> the Moves received and what came of them: as Mastodon does, the new
//        account is looked up and, when it names the old one among its aliases (alsoKnownAs),
//        alice follows it ({from, to, followed}); /admin/profile also shows movedTo and aliases
// NodeInfo 2.1 names the software $PEER_SOFTWARE (default "fedify-peer"), so a test can give
// servers running it a reply length limit.
// A target may be a handle, which Fedify resolves by WebFinger (over https, as it always does
// for handles; NODE_EXTRA_CA_CERTS names a test CA).
// Prints "READY <port>" once listening.
import { Temporal } from "@js-temporal/polyfill";
import { serve } from "@hono/node-server";
import {
  createFederation,
  generateCryptoKeyPair,
  MemoryKvStore,
} from "@fedify/fedify";
import {
  Activity,
  Create,
  Endpoints,
  Follow,
  Mention,
  Move,
  Note,
  Person,
  PropertyValue,
  PUBLIC_COLLECTION,
  QuoteAuthorization,
  QuoteRequest,
  Service,
} from "@fedify/vocab";

const port = Number(process.env.PEER_PORT ?? "3001");
const origin = `http://127.0.0.1:${port}`;
const firstKnock = process.env.PEER_FIRST_KNOCK ?? "rfc9421";

const pairs = [
  await generateCryptoKeyPair("RSASSA-PKCS1-v1_5"),
  await generateCryptoKeyPair("Ed25519"),
];
const received = [];
const moves = [];

const federation = createFederation({
  kv: new MemoryKvStore(),
  origin,
  allowPrivateAddress: true,
  skipSignatureVerification: false,
  firstKnock,
});

federation
  .setActorDispatcher("/users/{identifier}", async (ctx, identifier) => {
    if (identifier !== "alice") return null;
    const keys = await ctx.getActorKeyPairs(identifier);
    return new Person({
      id: ctx.getActorUri(identifier),
      preferredUsername: identifier,
      name: "Alice Peer",
      inbox: ctx.getInboxUri(identifier),
      followers: ctx.getFollowersUri(identifier),
      endpoints: new Endpoints({ sharedInbox: ctx.getInboxUri() }),
      publicKey: keys[0].cryptographicKey,
      assertionMethods: keys.map((k) => k.multikey),
    });
  })
  .setKeyPairsDispatcher(async (_ctx, identifier) =>
    identifier === "alice" ? pairs : []
  );

federation.setNodeInfoDispatcher("/nodeinfo/2.1", () => ({
  software: { name: process.env.PEER_SOFTWARE ?? "fedify-peer", version: "2.3.6" },
  protocols: ["activitypub"],
  usage: { users: { total: 1 }, localPosts: 0, localComments: 0 },
}));

federation.setFollowersDispatcher("/users/{identifier}/followers", async () => ({
  items: [],
}));

federation
  .setInboxListeners("/users/{identifier}/inbox", "/inbox")
  .on(Move, async (ctx, move) => {
    received.push(await move.toJsonLd({ format: "compact" }));
    const from = move.actorId?.href;
    const target = move.targetId == null ? null : await ctx.lookupObject(move.targetId);
    const named = target != null && move.objectId?.href === from &&
      target.aliasIds.some((a) => a.href === from);
    if (named) {
      await ctx.sendActivity(
        { identifier: "alice" },
        target,
        new Follow({
          id: new URL(`${origin}/follows/${crypto.randomUUID()}`),
          actor: ctx.getActorUri("alice"),
          object: target.id,
        }),
        { immediate: true },
      );
    }
    moves.push({ from, to: target?.id?.href ?? null, followed: named });
  })
  .on(Activity, async (_ctx, activity) => {
    received.push(await activity.toJsonLd({ format: "compact" }));
  })
  .onError((_ctx, error) => {
    console.error("inbox error:", error);
  });

const json = (body, status = 200) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json" },
  });

async function admin(req, url) {
  const ctx = federation.createContext(new URL(origin), undefined);
  if (req.method === "GET" && url.pathname === "/admin/received") {
    return json(received);
  }
  if (req.method === "GET" && url.pathname === "/admin/moves") {
    return json(moves);
  }
  const body = await req.json();
  const target = await ctx.lookupObject(body.target);
  if (target == null) return json({ error: "target not found" }, 404);
  const me = ctx.getActorUri("alice");
  if (url.pathname === "/admin/lookup") {
    return json({ id: target.id?.href, preferredUsername: target.preferredUsername });
  }
  if (url.pathname === "/admin/profile") {
    const image = async (get) => {
      const i = await get();
      if (i == null) return null;
      const u = i.url instanceof URL ? i.url : i.url?.href;
      return { url: u?.href ?? null, mediaType: i.mediaType ?? null };
    };
    const fields = [];
    for await (const a of target.getAttachments()) {
      if (a instanceof PropertyValue) {
        fields.push({ name: a.name?.toString(), value: a.value?.toString() });
      }
    }
    const featured = await target.getFeatured();
    const items = [];
    if (featured != null) {
      for await (const item of featured.getItems()) {
        items.push({ id: item.id?.href, content: item.content?.toString() });
      }
    }
    let pinned = null;
    if (items.length > 0) {
      const note = await ctx.lookupObject(items[0].id);
      pinned = note == null ? null : {
        id: note.id?.href,
        isNote: note instanceof Note,
        attributedTo: note.attributionId?.href,
        content: note.content?.toString(),
      };
    }
    return json({
      type: target instanceof Service ? "Service" : target instanceof Person ? "Person" : "other",
      icon: await image(() => target.getIcon()),
      image: await image(() => target.getImage()),
      fields,
      featured: featured == null ? null : { id: featured.id?.href, totalItems: featured.totalItems, items },
      pinned,
      discoverable: target.discoverable,
      indexable: target.indexable,
      movedTo: target.successorId?.href ?? null,
      aliases: target.aliasIds.map((a) => a.href),
    });
  }
  if (url.pathname === "/admin/quote") {
    const author = await ctx.lookupObject(target.attributionId);
    const noteId = new URL(`${origin}/notes/${crypto.randomUUID()}`);
    const quoting = new Note({
      id: noteId,
      attribution: me,
      tos: [PUBLIC_COLLECTION],
      content: "<p>worth reading</p>",
      quote: target.id,
      published: Temporal.Now.instant(),
    });
    const id = new URL(`${origin}/quote_requests/${crypto.randomUUID()}`);
    await ctx.sendActivity(
      { identifier: "alice" },
      author,
      new QuoteRequest({ id, actor: me, object: target.id, instrument: quoting }),
      { immediate: true },
    );
    const rule = target.interactionPolicy?.canQuote;
    return json({
      id: id.href,
      note: noteId.href,
      canQuote: rule == null ? null : rule.automaticApprovals.map((u) => u.href),
    });
  }
  if (url.pathname === "/admin/authorization") {
    return json({
      isAuthorization: target instanceof QuoteAuthorization,
      id: target.id?.href,
      attributedTo: target.attributionId?.href ?? null,
      interactingObject: target.interactingObjectId?.href ?? null,
      interactionTarget: target.interactionTargetId?.href ?? null,
    });
  }
  if (url.pathname === "/admin/follow") {
    const id = new URL(`${origin}/follows/${crypto.randomUUID()}`);
    await ctx.sendActivity(
      { identifier: "alice" },
      target,
      new Follow({ id, actor: me, object: target.id }),
      { immediate: true },
    );
    return json({ id: id.href });
  }
  if (url.pathname === "/admin/note") {
    const noteId = new URL(`${origin}/notes/${crypto.randomUUID()}`);
    const direct = body.visibility === "direct";
    const tos = direct ? [target.id] : [PUBLIC_COLLECTION];
    const ccs = direct ? [] : [target.id];
    const mention = body.mention ?? `@${target.preferredUsername}@${target.id.host}`;
    const content = `<p><span class="h-card"><a href="${target.id.href}" class="u-url mention">@<span>${target.preferredUsername}</span></a></span> ${body.text}</p>`;
    const note = new Note({
      id: noteId,
      attribution: me,
      tos,
      ccs,
      tags: [new Mention({ href: target.id, name: mention })],
      content,
      published: Temporal.Now.instant(),
    });
    const create = new Create({
      id: new URL(`${noteId.href}/activity`),
      actor: me,
      tos,
      ccs,
      object: note,
    });
    await ctx.sendActivity({ identifier: "alice" }, target, create, {
      immediate: true,
    });
    return json({ note: noteId.href, activity: `${noteId.href}/activity` });
  }
  return json({ error: "unknown admin route" }, 404);
}

serve(
  {
    port,
    hostname: "127.0.0.1",
    fetch: async (req) => {
      const url = new URL(req.url);
      if (url.pathname.startsWith("/admin/")) {
        try {
          return await admin(req, url);
        } catch (e) {
          console.error("admin error:", e);
          return json({ error: String(e) }, 500);
        }
      }
      return federation.fetch(req, { contextData: undefined });
    },
  },
  (info) => console.log(`READY ${info.port}`),
);
