import { parseRetryAfter, sleep } from "./retry.js";

const MAX_PACE_WAIT_MS = 120_000;

/** Keeps one client under the project's rate limit, as the Go client does.
 * Every answer's X-RateLimit-Limit, -Remaining and -Reset update it; before
 * each request it takes one of the remaining requests. When only a few are
 * left (5, or a quarter of a small limit) callers wait for a slot each, one
 * per the time the limit takes to win back one request, so a long loop runs
 * at the limit's steady rate instead of running into 429; when none are left
 * (or a 429 said so) everyone waits for the reset. One pacer is shared by
 * every call of a client object. */
export class Pacer {
  private known = false;
  private remaining = 0;
  private reset = 0; // ms since the epoch
  private limit = 0;
  private inFlight = 0;
  private nextSlot = 0;

  constructor(private readonly now: () => number = Date.now) {}

  private low(): number {
    return this.limit > 0 ? Math.min(5, Math.floor(this.limit / 4)) : 5;
  }

  /** Waits until a request may go (or the signal fires). */
  async wait(signal?: AbortSignal): Promise<void> {
    for (;;) {
      const now = this.now();
      if (this.known && now >= this.reset) this.known = false;
      if (!this.known || this.remaining > this.low()) return this.take();
      if (this.remaining <= 0 || this.limit <= this.remaining) {
        await sleep(Math.min(this.reset - now, MAX_PACE_WAIT_MS), signal);
        continue;
      }
      const interval = (this.reset - now) / (this.limit - this.remaining);
      let slot = this.nextSlot > now ? this.nextSlot + interval : now + interval;
      slot = Math.min(slot, now + MAX_PACE_WAIT_MS);
      this.nextSlot = slot;
      await sleep(slot - now, signal);
      return this.take();
    }
  }

  private take(): void {
    this.remaining--;
    this.inFlight++;
  }

  /** Records the end of a request started after wait, and what its answer
   * (null when none came) says about the limit. */
  done(res: { status: number; headers: Headers } | null): void {
    this.inFlight--;
    if (!res) return;
    const h = res.headers;
    const remaining = Number.parseInt(h.get("x-ratelimit-remaining") ?? "", 10);
    const reset = Number.parseInt(h.get("x-ratelimit-reset") ?? "", 10);
    if (Number.isNaN(remaining) || Number.isNaN(reset)) return;
    const limit = Number.parseInt(h.get("x-ratelimit-limit") ?? "", 10);
    if (!Number.isNaN(limit)) this.limit = limit;
    this.known = true;
    // Requests still in flight may not be counted in this answer yet.
    this.remaining = remaining - this.inFlight;
    this.reset = reset * 1000;
    if (res.status === 429) {
      const ra = parseRetryAfter(h.get("retry-after"), this.now());
      if (ra != null) {
        this.remaining = 0;
        this.reset = this.now() + ra;
      }
    }
  }
}
