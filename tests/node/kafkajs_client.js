// kafkajs (2.2.4) driven by tests/test_server_node.py against `pylog serve`: one action per run, its results as
// JSON lines on stdout, kafkajs' own log (level WARN) on stderr. Every run ends by itself: a deadline
// (argument --timeout-ms, default 30000) prints {"error": "timeout", ...} and exits with status 3.
//
//   node kafkajs_client.js BROKER produce TOPIC COUNT
//   node kafkajs_client.js BROKER consume TOPIC GROUP COUNT [--from-beginning] [--instance-id ID]
//        consumes COUNT records in a group (committing each), prints {"partition","offset","value"} per record
//        and {"requests": N} (requests sent to the broker), then leaves the group
//   node kafkajs_client.js BROKER delete-records TOPIC PARTITION OFFSET
//   node kafkajs_client.js BROKER reset-offsets TOPIC GROUP earliest|latest
//   node kafkajs_client.js BROKER fetch-offsets TOPIC GROUP
//   node kafkajs_client.js BROKER set-offsets TOPIC GROUP PARTITION:OFFSET[,PARTITION:OFFSET...]
//   node kafkajs_client.js BROKER offsets-by-timestamp TOPIC TIMESTAMP_MS
//        prints {"offsets": [{"partition", "offset"}]} (kafkajs' admin.fetchTopicOffsetsByTimestamp)
//   node kafkajs_client.js BROKER transactional-producer TRANSACTIONAL_ID TOPIC
//        prints {"error": name, "message", "type"} for the error a transactional producer meets
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const argv = process.argv.slice(2);
function option(name, fallback) {
  const i = argv.indexOf(name);
  if (i < 0) return fallback;
  const value = argv[i + 1];
  argv.splice(i, 2);
  return value;
}
function flag(name) {
  const i = argv.indexOf(name);
  if (i < 0) return false;
  argv.splice(i, 1);
  return true;
}
const timeoutMs = Number(option('--timeout-ms', '30000'));
const instanceId = option('--instance-id', undefined);
const fromBeginning = flag('--from-beginning');
const [broker, action, ...rest] = argv;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const deadline = setTimeout(() => {
  emit({ error: 'timeout', action, requests });
  process.exit(3);
}, timeoutMs);

let requests = 0;
const kafka = new Kafka({
  clientId: 'pylog-node-test',
  brokers: [broker],
  logLevel: logLevel.WARN,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
});

function countRequests(client) {
  client.on(client.events.REQUEST, () => { requests += 1; });
}

async function produce(topic, count) {
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < Number(count); i++) messages.push({ value: `v${i}` });
  const meta = await producer.send({ topic, messages });
  emit({ produced: meta });
  await producer.disconnect();
}

async function consume(topic, groupId, count) {
  const wanted = Number(count);
  const config = { groupId, sessionTimeout: 10000, heartbeatInterval: 500, rebalanceTimeout: 10000 };
  if (instanceId !== undefined) config.groupInstanceId = instanceId;
  const consumer = kafka.consumer(config);
  countRequests(consumer);
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning });
  let seen = 0;
  await new Promise((resolve, reject) => {
    consumer.on(consumer.events.CRASH, (e) => reject(e.payload.error));
    consumer.run({
      autoCommit: true,
      autoCommitThreshold: 1,
      eachMessage: async ({ partition, message }) => {
        emit({ partition, offset: Number(message.offset), value: message.value.toString() });
        seen += 1;
        if (seen >= wanted) resolve();
      },
    }).catch(reject);
  });
  emit({ requests });
  await consumer.disconnect();
}

async function withAdmin(fn) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

async function deleteRecords(topic, partition, offset) {
  await withAdmin(async (admin) => {
    await admin.fetchTopicMetadata({ topics: [topic] }); // deleteTopicRecords needs it loaded
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: Number(partition), offset }] });
  });
  emit({ deleted: true });
}

async function resetOffsets(topic, groupId, where) {
  await withAdmin((admin) => admin.resetOffsets({ groupId, topic, earliest: where === 'earliest' }));
  emit({ reset: where });
}

async function fetchOffsets(topic, groupId) {
  const got = await withAdmin((admin) => admin.fetchOffsets({ groupId, topics: [topic] }));
  emit({ offsets: got });
}

async function setOffsets(topic, groupId, spec) {
  const partitions = spec.split(',').map((x) => {
    const [partition, offset] = x.split(':');
    return { partition: Number(partition), offset };
  });
  await withAdmin((admin) => admin.setOffsets({ groupId, topic, partitions }));
  emit({ set: partitions });
}

async function offsetsByTimestamp(topic, timestamp) {
  const got = await withAdmin((admin) => admin.fetchTopicOffsetsByTimestamp(topic, Number(timestamp)));
  emit({ offsets: got });
}

async function transactionalProducer(transactionalId, topic) {
  // One transaction committed (values c0, c1), then one aborted (a0, a1): kafkajs' transaction API end to end.
  const producer = kafka.producer({ transactionalId, maxInFlightRequests: 1, idempotent: true,
    retry: { retries: 1, initialRetryTime: 100 } });
  try {
    await producer.connect();
    for (const [outcome, prefix] of [['commit', 'c'], ['abort', 'a']]) {
      const txn = await producer.transaction();
      const sent = await txn.send({ topic, messages: [{ value: `${prefix}0` }, { value: `${prefix}1` }] });
      await (outcome === 'commit' ? txn.commit() : txn.abort());
      emit({ error: null, outcome, errorCodes: sent.map((r) => r.errorCode) });
    }
  } catch (e) {
    emit({ error: e.name, message: e.message, type: e.type || null,
      cause: e.cause ? { name: e.cause.name, message: e.cause.message, type: e.cause.type || null } : null });
  } finally {
    await producer.disconnect();
  }
}

const actions = {
  'produce': produce,
  'consume': consume,
  'delete-records': deleteRecords,
  'reset-offsets': resetOffsets,
  'fetch-offsets': fetchOffsets,
  'set-offsets': setOffsets,
  'offsets-by-timestamp': offsetsByTimestamp,
  'transactional-producer': transactionalProducer,
};

(async () => {
  const fn = actions[action];
  if (fn === undefined) throw new Error(`unknown action ${action}`);
  await fn(...rest);
})().then(() => {
  clearTimeout(deadline);
}, (e) => {
  emit({ error: e.name, message: e.message, type: e.type || null, requests });
  process.exit(2);
});
