// Stand-in for tools/hf_tokenizer_reference.py where Python HF is missing: transformers.js (@huggingface/transformers)
// writes the same hf_encode.json / hf_chat.json layout. Setup (git-ignored folder):
//   npm install --prefix third_party_data/node @huggingface/transformers @huggingface/jinja
//   NODE_PATH=third_party_data/node/node_modules node tools/tokenizer_corpus/js_stand_in_reference.mjs \
//       third_party_data/qwen3-tokenizer tools/tokenizer_corpus third_party_data/js-fixtures
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';

const require = createRequire(path.resolve('third_party_data/node/node_modules') + '/');
const { AutoTokenizer, env } = await import(require.resolve('@huggingface/transformers'));
const [tokDir, corpusDir, outDir] = process.argv.slice(2);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(path.resolve(tokDir)) + '/';
const tok = await AutoTokenizer.from_pretrained(path.basename(path.resolve(tokDir)), { local_files_only: true });

const docs = [];
for (const f of fs.readdirSync(corpusDir).filter(f => f.endsWith('.txt')).sort()) {
  docs.push([f, fs.readFileSync(path.join(corpusDir, f), 'utf8')]);
}
JSON.parse(fs.readFileSync(path.join(corpusDir, 'snippets.json'), 'utf8')).forEach((t, i) => docs.push([`snippets.json[${i}]`, t]));
const records = docs.map(([name, text]) => {
  const ids = Array.from(tok.encode(text));
  const dec = (skip) => ids.length ? tok.decode(ids, { skip_special_tokens: skip }) : '';
  return { name, ids, decoded: dec(false), decoded_skip_special: dec(true) };
});
const chats = JSON.parse(fs.readFileSync(path.join(corpusDir, 'chat_conversations.json'), 'utf8')).map(c => {
  const kw = { tokenize: false, add_generation_prompt: c.add_generation_prompt ?? false };
  if (c.tools) kw.tools = c.tools;
  if (c.enable_thinking !== undefined) kw.enable_thinking = c.enable_thinking;
  return { name: c.name, text: tok.apply_chat_template(c.messages, kw) };
});
fs.mkdirSync(outDir, { recursive: true });
const versions = { 'transformers.js': JSON.parse(fs.readFileSync(path.resolve('third_party_data/node/node_modules/@huggingface/transformers/package.json'), 'utf8')).version };
fs.writeFileSync(path.join(outDir, 'hf_encode.json'), JSON.stringify({ versions, documents: records }));
fs.writeFileSync(path.join(outDir, 'hf_chat.json'), JSON.stringify({ versions, conversations: chats }, null, 1));
console.log(`wrote ${records.length} documents and ${chats.length} chats to ${outDir}`);
