// api.js — the page's only way to the server: GET /api/<endpoint>?<args>, JSON back, errors
// thrown with the server's message (docs/viewer.md lists the endpoints).

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export async function api(endpoint, args = {}, signal) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(args)) {
    if (v !== undefined && v !== null && v !== '') query.set(k, String(v));
  }
  const url = `/api/${endpoint}${query.toString() ? `?${query}` : ''}`;
  let response;
  try {
    response = await fetch(url, { signal, cache: 'no-store' });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(`cannot reach the hbm view server (${err.message}); is it still running?`, 0);
  }
  let body;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`the server answered ${response.status} without JSON for ${url}`, response.status);
  }
  if (!response.ok) throw new ApiError(body.error || `HTTP ${response.status}`, response.status);
  return body;
}
