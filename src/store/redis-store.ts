import Redis, { Cluster } from 'ioredis';
import { connectRedis, pingRedis, RedisClient, RedisConnectionEvents, RedisConnectionSettings } from './redis-connection';
import { StoreUnavailableError } from './store-unavailable-error';

/**
 * A Redis connection the ports' Redis implementations share (`StoreBackend`: one for what a pickup waits on, one for
 * the rest), each command written as it is issued (see `nodeOptions` for why not auto-pipelined), or, when it gathers
 * turns, with the rest of its turn's (`gatherTurn`). Each port defines its own scripts on it (`defineScripts`).
 */
export class RedisStore {
  /** The socket corked until the end of this turn's I/O callbacks, when writes are gathered by turn. */
  private corkedForTurn: Redis['stream'] | undefined;

  constructor(
    readonly client: RedisClient,
    private readonly durability: { readonly waitReplicas: number; readonly waitTimeoutMs: number } = { waitReplicas: 0, waitTimeoutMs: 0 },
    private readonly gathersTurns = false,
  ) {}

  /**
   * Connects, waiting at most `startWaitMs` for the first connection so the first pickups after a
   * start find Redis ready. Redis being down is not fatal: the service starts, reports not ready,
   * answers `degraded`, and ioredis keeps reconnecting.
   */
  static async open(settings: RedisConnectionSettings, events?: RedisConnectionEvents, startWaitMs = 2000): Promise<RedisStore> {
    const client = connectRedis(settings, events);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, startWaitMs);
      client.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    return new RedisStore(client, { waitReplicas: settings.waitReplicas ?? 0, waitTimeoutMs: settings.commandTimeoutMs }, settings.gathersTurns ?? false);
  }

  /** The one socket commands are written to; none on a cluster, whose commands go to several. */
  private get socket(): Redis['stream'] | undefined {
    return this.isCluster ? undefined : (this.client as Redis).stream;
  }

  /** Whether this is a Redis Cluster, where a script's keys must all be in one slot. */
  get isCluster(): boolean {
    return this.client instanceof Cluster;
  }

  /** Whether writes wait for replicas (REDIS_WAIT_REPLICAS): when not, `replicated` need not be called at all. */
  get waitsForReplicas(): boolean {
    return this.durability.waitReplicas > 0;
  }

  /**
   * Calls `issue`, which sends several commands, and hands them to the socket in one write. ioredis writes each command
   * as it is issued, one system call each: the parking transaction's writes (five commands and more) cost the service
   * 75 µs a parked export, 41 µs written together, the HTTP answers included (issue 37, bench/outcome-sampling.bench.ts
   * with `--cpu-prof`). On a cluster, whose commands go to several sockets, `issue` is just called.
   */
  together<T>(issue: () => T): T {
    const socket = this.socket;
    socket?.cork();
    try {
      return issue();
    } finally {
      socket?.uncork();
    }
  }

  /**
   * Outside a cluster: MULTI, the commands `issue` sends on the one connection, EXEC, written together, so nothing else
   * of this process comes between them and no ioredis Pipeline is built (each copies every script of the connection
   * onto itself; built per call, they were promoted: issue 37). `issue` answers the commands' promises (each says it
   * was queued). Answers each command's reply, in order; throws the first command's error, or when Redis discarded the transaction. Scripts in it go as EVAL, not EVALSHA: a script
   * missing from Redis' cache would fail inside the transaction while the commands beside it still ran.
   */
  async transaction(issue: (client: Redis) => Promise<unknown>[]): Promise<unknown[]> {
    const client = this.client as Redis;
    const sent = this.together(() => [client.multi({ pipeline: false }), ...issue(client), client.exec()]);
    const answers = (await Promise.all(sent))[sent.length - 1] as Array<[Error | null, unknown]> | null;
    const failed = answers?.find(([error]) => error !== null)?.[0];
    if (answers === null || failed) throw failed ?? new Error('the transaction was discarded');
    return answers.map(([, reply]) => reply);
  }

  /** Runs store commands; any failure is a StoreUnavailableError. */
  async guard<T>(operation: () => Promise<T>): Promise<T> {
    if (this.gathersTurns) this.gatherTurn();
    try {
      return await operation();
    } catch (error) {
      // ioredis refuses a command while disconnected with "Stream isn't writeable and enableOfflineQueue
      // options is false", which says nothing to whoever reads it in a log.
      throw new StoreUnavailableError(this.client.status === 'ready' ? error : new Error(`not connected (${this.client.status})`, { cause: error }));
    }
  }

  /**
   * Holds this connection's writes until the I/O callbacks of this turn of the event loop have run (setImmediate), so
   * the commands of every request read in one turn go to Redis in one system call. Loaded, the pickups arrive several
   * to a turn, and each command written alone was a write to the socket that cost as much as the answer's (issue 37);
   * at a trickle a turn holds one and the wait is the rest of that turn. The order of the commands is kept. On a cluster,
   * whose commands go to several sockets, each is written as it is issued.
   */
  private gatherTurn(): void {
    const socket = this.socket;
    if (socket === undefined || socket === this.corkedForTurn) return;
    this.corkedForTurn = socket;
    socket.cork();
    setImmediate(() => {
      if (this.corkedForTurn === socket) this.corkedForTurn = undefined;
      socket.uncork();
    });
  }

  /**
   * With REDIS_WAIT_REPLICAS, resolves once that many replicas have every write this connection made
   * so far (Redis WAIT), including the write just acknowledged; a write they did not confirm within the
   * command timeout counts as not stored (SPEC §7, failover). The key only routes WAIT to the primary
   * that took the write, on a cluster.
   */
  async replicated(routingKey: string): Promise<void> {
    const { waitReplicas, waitTimeoutMs } = this.durability;
    if (waitReplicas === 0) return;
    const results = await this.client.pipeline().exists(routingKey).wait(waitReplicas, waitTimeoutMs).exec();
    const [error, acknowledged] = results?.[1] ?? [new Error('no answer to WAIT'), 0];
    if (error !== null) throw error;
    if (Number(acknowledged) < waitReplicas) {
      throw new Error(`write reached ${Number(acknowledged)} of ${waitReplicas} replicas within ${waitTimeoutMs} ms`);
    }
  }

  /** Resolves when the store can take writes; rejects with StoreUnavailableError otherwise. */
  async ping(): Promise<void> {
    await this.guard(() => pingRedis(this.client));
  }

  async close(): Promise<void> {
    this.client.disconnect();
  }
}
