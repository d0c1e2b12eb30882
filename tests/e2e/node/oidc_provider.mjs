// A real OpenID Provider (panva's certified oidc-provider) on loopback, for the external-IdP tests.
// Usage: node oidc_provider.mjs CONFIG.json. The config names the port (0: any free one), the
// signing keys (the first RSA key signs; listing the old one second is a key rotation), the
// clients, and the access token format for resource-bound tokens ("jwt" or "opaque").
// Prints one JSON line {"issuer": ..., "port": ...} once it listens. Logins use devInteractions:
// any login name is an account, whose id (the token's `sub`) is that name.
// GET /_test/requests answers how many requests it has served, by "METHOD /path", so tests can
// count what the service sent it (token requests, say).
import http from 'node:http';
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const server = http.createServer();

server.listen(config.port ?? 0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: config.clients,
    jwks: { keys: config.keys },
    cookies: { keys: ['oidc-provider-test-cookie-key'] },
    pkce: { required: () => true },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name'],
    },
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resourceIndicator) => ({
          scope: 'mcp',
          audience: resourceIndicator,
          accessTokenTTL: 600,
          accessTokenFormat: config.accessTokenFormat ?? 'jwt',
        }),
      },
    },
    findAccount: (ctx, id) => ({
      accountId: id,
      claims: () => ({
        sub: id,
        preferred_username: id,
        name: id,
        email: `${id}@example.test`,
        email_verified: true,
      }),
    }),
    // First-party clients: consent is implied, so a login is the only interaction.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      let grant = grantId ? await ctx.oidc.provider.Grant.find(grantId) : undefined;
      if (!grant) {
        grant = new ctx.oidc.provider.Grant({
          clientId: ctx.oidc.client.clientId,
          accountId: ctx.oidc.session.accountId,
        });
      }
      grant.addOIDCScope('openid email profile');
      const resource = ctx.oidc.params.resource;
      for (const indicator of Array.isArray(resource) ? resource : resource ? [resource] : []) {
        grant.addResourceScope(indicator, 'mcp');
      }
      await grant.save();
      return grant;
    },
  });
  const served = {};
  const callback = provider.callback();
  server.on('request', (req, res) => {
    const { pathname } = new URL(req.url, issuer);
    if (req.method === 'GET' && pathname === '/_test/requests') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(served));
      return;
    }
    const key = `${req.method} ${pathname}`;
    served[key] = (served[key] ?? 0) + 1;
    callback(req, res);
  });
  process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
