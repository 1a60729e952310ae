// Mounts GraphiQL for work-ledger (ours, not vendored). Served by the binary
// itself, like everything else the page loads: no URL here leaves the server.
//
// - Queries and mutations: POST /graphql; subscriptions: /graphql/ws
//   (graphql-transport-ws). Both carry the JSON of the Headers pane: as HTTP
//   headers, and as the connection_init payload of the websocket, which is
//   where the server reads {"Authorization": "Bearer <token>"}.
// - The Headers pane (the token) is kept in sessionStorage: for this browser
//   tab until it closes, never on disk. GraphiQL's tabs go there too. New
//   GraphiQL tabs start with the last headers that held a token. Query
//   history and favourites stay in localStorage, with their headers removed.
// - The schema (docs, completion, validation) is schema.graphql, served
//   alongside, so it shows before a token is entered.
// - No token is ever taken from a URL: a `#token=` is removed from the
//   address bar and ignored, with a notice. ?query=, ?variables= and
//   ?operationName= pre-fill the editors, except that a document holding a
//   mutation arrives commented out under a warning: a link never makes one
//   click write.
// - Inside a frame the page does nothing (the server forbids framing too).
(function () {
  'use strict';

  if (window.top !== window.self) {
    document.getElementById('graphiql').textContent = 'work-ledger GraphiQL does not run inside a frame.';
    return;
  }

  var PLACEHOLDER = '<paste token>';
  var DEFAULT_QUERY = [
    '# work-ledger: cost, dispositions, stalled units.',
    '#',
    '# Put your token in the Headers pane below',
    '# (kept for this browser tab until it closes):',
    '#   {"Authorization": "Bearer <paste token>"}',
    '# New token: `work-ledger token create`.',
    '# It goes with every query, and with every',
    '# subscription (websocket connection_init).',
    '# Run: the play button or Ctrl-Enter.',
    '',
    'query Dashboard {',
    '  serverTime',
    '  # What has it cost, and what is still open?',
    '  costSummary(groupBy: DISPOSITION) {',
    '    key',
    '    units',
    '    costCents',
    '    avgCostCents',
    '  }',
    '  dispositionSummary {',
    '    disposition',
    '    count',
    '    costCents',
    '  }',
    '  # Who went silent, and for how long?',
    '  stalls(first: 20) {',
    '    totalCount',
    '    edges {',
    '      holder',
    '      stalledForSeconds',
    '      node {',
    '        id',
    '        externalRef',
    '      }',
    '    }',
    '  }',
    '}',
    '',
  ].join('\n');

  function headersFor(token) {
    return JSON.stringify({ Authorization: 'Bearer ' + token }, null, 2);
  }

  // True when `text` is a JSON object with a filled-in Authorization header.
  function hasToken(text) {
    var headers;
    try {
      headers = JSON.parse(text || '');
    } catch (e) {
      return false;
    }
    if (!headers || typeof headers !== 'object') return false;
    return Object.keys(headers).some(function (key) {
      var value = headers[key];
      return key.toLowerCase() === 'authorization' && typeof value === 'string' &&
        /^Bearer \S/i.test(value) && value.indexOf(PLACEHOLDER) < 0;
    });
  }

  // GraphiQL's storage: what can hold a token lives in sessionStorage; the
  // rest in localStorage, with headers taken out of history entries.
  var PREFIX = 'graphiql:';
  var SESSION_KEYS = ['headers', 'tabState'];
  var HISTORY_KEYS = ['queries', 'favorites'];
  var TOKEN = /wl_[A-Za-z0-9_-]{20,}/g;

  function area(name) {
    try {
      return window[name];
    } catch (e) {
      return null;
    }
  }
  var local = area('localStorage');
  var session = area('sessionStorage');

  function bare(key) {
    return key.indexOf(PREFIX) === 0 ? key.slice(PREFIX.length) : key;
  }

  function areaFor(key) {
    return SESSION_KEYS.indexOf(bare(key)) >= 0 ? session : local;
  }

  // A history entry keeps its query, variables and name, never its headers.
  function scrub(key, value) {
    if (typeof value !== 'string') return value;
    if (HISTORY_KEYS.indexOf(bare(key)) >= 0) {
      try {
        var saved = JSON.parse(value);
        var items = saved && saved[bare(key)];
        if (Array.isArray(items)) {
          items.forEach(function (item) {
            if (item && typeof item === 'object') delete item.headers;
          });
          value = JSON.stringify(saved);
        }
      } catch (e) {
        // Not GraphiQL's shape: the token pattern below still applies.
      }
    }
    return value.replace(TOKEN, 'wl_<removed>');
  }

  function ownKeys(store) {
    var keys = [];
    if (!store) return keys;
    for (var i = 0; i < store.length; i++) {
      var key = store.key(i);
      if (key && key.indexOf(PREFIX) === 0) keys.push(key);
    }
    return keys;
  }

  var storage = {
    getItem: function (key) {
      var store = areaFor(key);
      try {
        return store ? store.getItem(key) : null;
      } catch (e) {
        return null;
      }
    },
    setItem: function (key, value) {
      var store = areaFor(key);
      if (store) store.setItem(key, store === local ? scrub(key, value) : value);
    },
    removeItem: function (key) {
      var store = areaFor(key);
      if (store) store.removeItem(key);
    },
    clear: function () {
      [local, session].forEach(function (store) {
        ownKeys(store).forEach(function (key) {
          store.removeItem(key);
        });
      });
    },
    get length() {
      return ownKeys(local).length + ownKeys(session).length;
    },
  };

  // Earlier versions kept the token in localStorage: take it out.
  if (local) {
    try {
      SESSION_KEYS.forEach(function (key) {
        local.removeItem(PREFIX + key);
      });
      ownKeys(local).forEach(function (key) {
        var value = local.getItem(key);
        var clean = scrub(key, value);
        if (clean !== value) local.setItem(key, clean);
      });
    } catch (e) {
      // Storage refused: nothing was kept there either.
    }
  }

  function stored(key) {
    return storage.getItem(PREFIX + key);
  }

  var props = {
    fetcher: GraphiQL.createFetcher({
      url: location.origin + '/graphql',
      subscriptionUrl: (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/graphql/ws',
    }),
    defaultQuery: DEFAULT_QUERY,
    shouldPersistHeaders: true,
    storage: storage,
  };

  // The last headers with a token that GraphiQL kept (it keeps none when
  // its "persist headers" setting is off): the pane as last edited, else the
  // tabs' headers, active tab first.
  function rememberedHeaders() {
    var candidates = [stored('headers')];
    try {
      var tabState = JSON.parse(stored('tabState') || 'null');
      if (tabState && Array.isArray(tabState.tabs)) {
        var active = tabState.tabs[tabState.activeTabIndex];
        candidates.push(active && active.headers);
        tabState.tabs.slice().reverse().forEach(function (tab) {
          candidates.push(tab && tab.headers);
        });
      }
    } catch (e) {
      // Unreadable tab state: GraphiQL starts afresh too.
    }
    return candidates.filter(hasToken)[0] || null;
  }

  var remembered = rememberedHeaders();
  var initialDefaultHeaders = remembered || headersFor(PLACEHOLDER);
  if (!remembered) props.defaultEditorToolsVisibility = 'headers';

  // Notices shown at the top of the query editor.
  var notices = [];

  var fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has('token')) {
    fragment.delete('token');
    var rest = fragment.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
    notices.push(
      '# This link carried a token. GraphiQL never takes',
      '# a token from a link: it was ignored and removed',
      '# from the address bar. The browser history may',
      '# still hold the link: treat that token as exposed',
      '# and have it revoked (`work-ledger token revoke`).',
      '# Paste tokens into the Headers pane.',
      ''
    );
  }

  // Whether a document only reads (no mutation); one that does not parse
  // cannot be told apart, so it counts as a write.
  function onlyReads(text) {
    try {
      return GraphiQL.GraphQL.parse(text).definitions.every(function (definition) {
        return definition.kind !== 'OperationDefinition' || definition.operation !== 'mutation';
      });
    } catch (e) {
      return false;
    }
  }

  var search = new URLSearchParams(location.search);
  ['query', 'variables', 'operationName'].forEach(function (key) {
    if (search.has(key)) props[key] = search.get(key);
  });
  if (typeof props.query === 'string' && !onlyReads(props.query)) {
    notices.push(
      '# WARNING: this link carried a document that may',
      '# WRITE (a mutation). It is commented out below so',
      '# that it cannot run by accident. Read it, and run',
      '# it only if you meant to: remove the leading "# "',
      '# of its lines, then press run.',
      ''
    );
    props.query = props.query
      .split('\n')
      .map(function (line) {
        return '# ' + line;
      })
      .join('\n');
  }
  if (notices.length) props.query = notices.join('\n') + '\n' + (props.query || DEFAULT_QUERY);

  function WorkLedgerGraphiQL() {
    var state = React.useState(initialDefaultHeaders);
    var defaultHeaders = state[0];
    var setDefaultHeaders = state[1];
    return React.createElement(GraphiQL, Object.assign({}, props, {
      defaultHeaders: defaultHeaders,
      onEditHeaders: function (text) {
        if (hasToken(text)) setDefaultHeaders(text);
      },
    }));
  }

  function mount(schema) {
    if (schema) props.schema = schema;
    ReactDOM.createRoot(document.getElementById('graphiql')).render(React.createElement(WorkLedgerGraphiQL));
  }

  // The schema comes from the SDL the binary was built with, not from
  // introspection (which the server's query depth limit refuses). Should that
  // fail, GraphiQL falls back to introspecting.
  fetch(document.getElementById('work-ledger-schema').href)
    .then(function (response) {
      if (!response.ok) throw new Error('HTTP ' + response.status);
      return response.text();
    })
    .then(function (sdl) {
      return GraphiQL.GraphQL.buildSchema(sdl);
    })
    .then(mount, function (error) {
      console.warn('work-ledger: schema.graphql unusable, GraphiQL will introspect', error);
      mount(undefined);
    });
})();
