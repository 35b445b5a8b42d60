// A skill written in JavaScript: it runs in a fresh sandbox on every call.
export const frontmatter = {
  name: 'word-count',
  description: 'Counts the words of a text.',
  metadata: {
    visibility: 'public',
    params: {
      type: 'object',
      properties: { text: { type: 'string', description: 'The text to count.' } },
      required: ['text'],
    },
  },
};

export default async function (ctx, args) {
  const words = args.text.split(/\s+/).filter((w) => w.length > 0);
  return { words: words.length };
}
